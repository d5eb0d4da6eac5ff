// SPDX-License-Identifier: Apache-2.0
// The hottest functions of a host over the page's time range, from whole-system PC sampling: self
// samples (the function's own code) and inclusive samples (from call stacks: the function and everything
// it called), sortable, paged, exportable as CSV or pprof. Share is of all the host's samples (kernel and user); user and idle samples
// are shown apart, and idle-loop functions are left out of the ranking unless asked for.
import { useState } from "react";
import { Link } from "react-router-dom";
import { api, unwrap } from "../../api/client";
import { useTopFunctions } from "../../api/queries";
import { formatCount, formatRate, formatShare } from "../../lib/format";
import { formatRange, rangeQuery } from "../../lib/timeRange";
import { rangeSearch, type HostView, type TopSort } from "../../lib/urlState";
import { downloadText } from "../../lib/download";
import { PprofButton } from "../../shared/PprofButton";

export const PAGE_SIZE = 50;

const COLUMNS: { key: TopSort | null; label: string; num?: boolean; title?: string }[] = [
  { key: null, label: "#", num: true },
  { key: "name", label: "Function" },
  { key: "module", label: "Module" },
  { key: "samples", label: "Self (samples)", num: true, title: "samples in the function's own code" },
  {
    key: "inclusive",
    label: "Inclusive (samples)",
    num: true,
    title: "samples whose call stack contains the function",
  },
  { key: "samples", label: "Self/s", num: true },
  { key: "samples", label: "Share of all samples", num: true },
];

export function TopFunctionsView({
  hostId,
  view,
  update,
  live,
}: {
  hostId: string;
  view: HostView;
  update: (patch: Partial<HostView>, options?: { push?: boolean }) => void;
  live: boolean;
}) {
  const top = useTopFunctions(hostId, view.range, live, {
    limit: PAGE_SIZE,
    offset: (view.page - 1) * PAGE_SIZE,
    sort: view.topSort,
    desc: view.topDesc,
    includeIdle: view.idle,
  });
  const [exporting, setExporting] = useState<string | null>(null);
  const items = top.data?.items ?? [];
  const maxShare = Math.max(0, ...items.map((i) => i.share));
  const pages = Math.max(1, Math.ceil((top.data?.functions ?? 0) / PAGE_SIZE));
  const t = top.data;

  const sortBy = (key: TopSort) => {
    if (key === view.topSort) update({ topDesc: !view.topDesc, page: 1 }, { push: true });
    else update({ topSort: key, topDesc: key === "samples" || key === "inclusive", page: 1 }, { push: true });
  };
  const exportCsv = async () => {
    setExporting("exporting…");
    try {
      const res = await api.GET("/api/v1/hosts/{host_id}/profile", {
        params: {
          path: { host_id: hostId },
          query: { ...rangeQuery(view.range), format: "csv", include_idle: view.idle },
        },
        parseAs: "text",
      });
      const text = await unwrap(Promise.resolve(res));
      const disposition = res.response.headers.get("Content-Disposition") ?? "";
      const name = /filename="([^"]+)"/.exec(disposition)?.[1] ?? "hotpath-profile.csv";
      downloadText(name, text, "text/csv");
      setExporting(null);
    } catch (e) {
      setExporting(`export failed: ${e instanceof Error ? e.message : String(e)}`);
    }
  };

  return (
    <div className="top-functions">
      <div className="toolbar">
        {t && (
          <span className="totals" data-testid="top-totals">
            {formatCount(t.total_samples)} samples in {formatRange(view.range)}: kernel {formatCount(t.kernel_samples)}{" "}
            (idle {formatCount(t.idle_samples)}, {formatShare(t.total_samples ? t.idle_samples / t.total_samples : 0)}),
            user {formatCount(t.user_samples)} ({formatShare(t.total_samples ? t.user_samples / t.total_samples : 0)})
          </span>
        )}
        <label className="inline-label">
          <input
            type="checkbox"
            checked={view.idle}
            onChange={(e) => update({ idle: e.target.checked, page: 1 }, { push: true })}
          />
          rank idle-loop functions too
        </label>
        <button type="button" onClick={() => void exportCsv()}>
          Export CSV
        </button>
        <PprofButton
          hostId={hostId}
          range={view.range}
          filter={{ pid: null, comm: null, cpu: null, idle: view.idle ? "include" : "exclude" }}
        />
        {exporting && (
          <span className={exporting.startsWith("export failed") ? "error small" : "muted small"} role="status">
            {exporting}
          </span>
        )}
      </div>
      {top.isError && (
        <p className="error" role="alert">
          Could not load top functions: {top.error.message}
        </p>
      )}
      <table className="grid top" aria-label="Top functions" aria-busy={top.isFetching}>
        <thead>
          <tr>
            {COLUMNS.map((c, i) => (
              <th
                key={i}
                scope="col"
                className={c.num ? "num" : undefined}
                aria-sort={
                  c.key && c.key === view.topSort && i !== 5 && i !== 6
                    ? view.topDesc
                      ? "descending"
                      : "ascending"
                    : undefined
                }
              >
                {c.key ? (
                  <button type="button" className="th-sort" title={c.title} onClick={() => sortBy(c.key!)}>
                    {c.label}
                    {c.key === view.topSort && i === COLUMNS.findIndex((x) => x.key === c.key)
                      ? view.topDesc
                        ? " ▼"
                        : " ▲"
                      : ""}
                  </button>
                ) : (
                  c.label
                )}
              </th>
            ))}
            <th scope="col" className="bar-col">
              <span className="visually-hidden">Share bar</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {top.isPending && !top.isError && (
            <tr>
              <td colSpan={8} className="muted" role="status">
                Loading {formatRange(view.range)}…
              </td>
            </tr>
          )}
          {t && items.length === 0 && (
            <tr>
              <td colSpan={8} className="muted">
                No {view.idle ? "" : "non-idle "}kernel samples in {formatRange(view.range)}.
              </td>
            </tr>
          )}
          {items.map((f, i) => (
            <tr key={f.function_id}>
              {/* The spaces keep cell texts apart in the row's text, so names read as whole words. */}
              <td className="num">{(view.page - 1) * PAGE_SIZE + i + 1} </td>
              <td>
                <Link to={`/hosts/${encodeURIComponent(hostId)}/functions/${f.function_id}?${rangeSearch(view.range)}`}>
                  {f.name}
                </Link>
                {f.idle && <span className="badge idle">idle</span>}{" "}
              </td>
              <td>{f.module} </td>
              <td className="num">{formatCount(f.samples)} </td>
              <td className="num">
                {f.inclusive_samples === null || f.inclusive_samples === undefined ? (
                  <span className="muted" title="no call stacks in this range">
                    –
                  </span>
                ) : (
                  formatCount(f.inclusive_samples)
                )}{" "}
              </td>
              <td className="num">{formatRate(f.samples_per_sec)} </td>
              <td className="num">{formatShare(f.share)} </td>
              <td className="bar-col">
                <div className="bar" aria-hidden="true">
                  <div className="bar-fill" style={{ width: `${maxShare > 0 ? (f.share / maxShare) * 100 : 0}%` }} />
                </div>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <div className="pager" role="navigation" aria-label="Pages">
        <button type="button" disabled={view.page <= 1} onClick={() => update({ page: view.page - 1 }, { push: true })}>
          ← Previous
        </button>
        <span>
          Page {view.page} of {pages}
          {t ? ` · ${formatCount(t.functions)} functions` : ""}
        </span>
        <button
          type="button"
          disabled={view.page >= pages}
          onClick={() => update({ page: view.page + 1 }, { push: true })}
        >
          Next →
        </button>
      </div>
    </div>
  );
}
