// SPDX-License-Identifier: Apache-2.0
// A kernel-build group's hot code over a time range: the hottest functions across its hosts, with the
// share of hosts where each is hot, as a hosts × functions heat table sorted by the server (samples,
// share of hosts, name). A host's cell opens that host's function view over the same range. Outlier hosts
// (a function far hotter on a few hosts than on the group's typical host, by the rule the answer states)
// are outlined in the table and listed in a panel with the reason, each opening that host's function view.
// Beside the table, the group's flame graph and a comparison of two sides of it (`views`: given by the page
// that composes this feature with the flame graphs, pages/FleetGroupPage.tsx). The range, sort, label
// filter, hot threshold and view live in the URL.
import type { ReactNode } from "react";
import { Link, useParams, useSearchParams } from "react-router-dom";
import type { FleetHotCode } from "../../api/types";
import { useHotCode, type HotSort } from "../../api/fleetQueries";
import { formatRange, parseRange, rangeParams, type TimeRange } from "../../lib/timeRange";
import { withParams } from "../../lib/urlState";
import { TimeRangePicker } from "../../shared/TimeRangePicker";
import {
  cellLink,
  heatLevel,
  heatTable,
  hostShareText,
  labelTexts,
  outlierReason,
  parseLabelFilter,
  pct,
} from "./fleetModel";

const SORTS: { key: HotSort; label: string }[] = [
  { key: "name", label: "Function" },
  { key: "samples", label: "Samples" },
  { key: "hosts", label: "Hot on" },
];
const DEFAULT_HOT_RANGE: TimeRange = { kind: "relative", seconds: 3600 };
const GRAIN_NAMES: Record<string, string> = { "1h": "hour", "10m": "ten-minute", "1m": "minute" };

type GroupView = "hot" | "flame" | "compare";
const VIEW_NAMES: Record<GroupView, string> = { hot: "Hot code", flame: "Flame graph", compare: "Compare" };

/** What a group view beside the hot code is given: the group, its label filter and the range. */
export interface GroupViewProps {
  groupId: string;
  labels: string[];
  range: TimeRange;
}

export function HotCodePage({
  views = {},
}: {
  views?: Partial<Record<"flame" | "compare", (p: GroupViewProps) => ReactNode>>;
}) {
  const { groupId = "" } = useParams();
  const [search, setSearch] = useSearchParams();
  const { labels } = parseLabelFilter(search.get("label") ?? "");
  const range = search.get("from") ? parseRange(search.get("from"), search.get("to")) : DEFAULT_HOT_RANGE;
  const sort = (
    ["samples", "hosts", "name"].includes(search.get("sort") ?? "") ? search.get("sort") : "samples"
  ) as HotSort;
  const desc = search.get("order") !== "asc";
  const minShare = Math.min(1, Math.max(0.001, Number(search.get("min") ?? "0.01") || 0.01));
  const hot = useHotCode(groupId, labels, range, sort, desc, minShare);
  const asked = search.get("view") as GroupView | null;
  const view: GroupView = asked === "flame" || asked === "compare" ? (views[asked] ? asked : "hot") : "hot";
  const shown = (["hot", "flame", "compare"] as GroupView[]).filter((v) => v === "hot" || views[v]);

  const update = (change: Record<string, string | null>) => setSearch(withParams(search, change));
  const setRange = (r: TimeRange) => update(rangeParams(r));
  const sortBy = (key: HotSort) => {
    const nextDesc = key === sort ? !desc : key !== "name";
    update({ sort: key, order: nextDesc ? "desc" : "asc" });
  };

  const data = hot.data;
  const table = data ? heatTable(data) : null;
  return (
    <section className="hot-code">
      <p>
        <Link to={labels.length ? `/?label=${encodeURIComponent(labels.join(" "))}` : "/"}>← Fleet</Link>
      </p>
      <div className="page-head">
        <h1>{view === "hot" ? "Fleet hot code" : view === "flame" ? "Fleet flame graph" : "Fleet compare"}</h1>
        {data && (
          <span className="muted">
            {data.group.kernel_release} · build {data.group.kernel_build_id.slice(0, 12) || "none"}
            {labels.length > 0 && <> · {labels.join(", ")}</>}
          </span>
        )}
      </div>
      {shown.length > 1 && (
        <div className="tabs" role="tablist" aria-label="Group views">
          {shown.map((v) => (
            <button
              key={v}
              type="button"
              role="tab"
              aria-selected={view === v}
              onClick={() => update({ view: v === "hot" ? null : v })}
            >
              {VIEW_NAMES[v]}
            </button>
          ))}
        </div>
      )}
      <div className="toolbar">
        <TimeRangePicker range={range} onChange={setRange} />
        {view === "hot" && (
          <label>
            Hot from{" "}
            <select value={String(minShare)} onChange={(e) => update({ min: e.target.value })}>
              {[0.005, 0.01, 0.02, 0.05, 0.1, 0.2].map((v) => (
                <option key={v} value={String(v)}>
                  {v * 100}% of a host&apos;s samples
                </option>
              ))}
            </select>
          </label>
        )}
      </div>
      {view !== "hot" && views[view]?.({ groupId, labels, range })}
      {view === "hot" && hot.isPending && <p className="muted">Loading hot code…</p>}
      {view === "hot" && hot.isError && (
        <p className="error" role="alert">
          Could not load hot code: {hot.error.message}
        </p>
      )}
      {view === "hot" && data && table && (
        <>
          <p className="muted small">
            {formatRange(range)}: read from the{" "}
            {[...new Set(data.rollups.map((r) => GRAIN_NAMES[r.grain] ?? r.grain))].join(" and ")} rollups
            {data.covered_from && data.covered_to ? (
              <>
                , covering {new Date(data.covered_from).toLocaleTimeString()} –{" "}
                {new Date(data.covered_to).toLocaleTimeString()} (whole minutes already rolled up)
              </>
            ) : (
              <> — no whole rolled-up minute in this range yet</>
            )}
            . {data.functions} function{data.functions === 1 ? "" : "s"} with samples on {table.hosts.length} host
            {table.hosts.length === 1 ? "" : "s"}.
          </p>
          <OutlierPanel data={data} />
          {data.items.length === 0 ? (
            <p className="muted">No samples from this group in the range.</p>
          ) : (
            <div className="heat-scroll">
              <table className="grid heat-table" aria-label="Hot code across hosts">
                <thead>
                  <tr>
                    {SORTS.map((s) => (
                      <th
                        key={s.key}
                        scope="col"
                        aria-sort={sort === s.key ? (desc ? "descending" : "ascending") : "none"}
                      >
                        <button type="button" className="link-button" onClick={() => sortBy(s.key)}>
                          {s.label}
                          {sort === s.key ? (desc ? " ▼" : " ▲") : ""}
                        </button>
                      </th>
                    ))}
                    {table.hosts.map((h) => (
                      <th key={h.id} scope="col" className="heat-host" title={labelTexts(h.labels).join(" ")}>
                        <Link to={`/hosts/${encodeURIComponent(h.id)}`}>{h.hostname}</Link>
                        {!h.online && <span className="muted small"> offline</span>}
                      </th>
                    ))}
                  </tr>
                </thead>
                <tbody>
                  {table.rows.map(({ fn, cells }) => (
                    <tr key={fn.function_id}>
                      <th scope="row" className="mono">
                        {fn.name} <span className="muted small">{fn.module}</span>
                      </th>
                      <td className="num">{fn.samples.toLocaleString("en-US")}</td>
                      <td>{hostShareText(fn, table.hosts.length)}</td>
                      {cells.map((c, i) => {
                        const host = table.hosts[i];
                        const level = heatLevel(c);
                        return (
                          <td
                            key={host.id}
                            className={`heat heat-${level}${c?.hot ? " heat-hot" : ""}${c?.outlier ? " heat-outlier" : ""}`}
                            title={
                              c?.outlier && fn.median_share !== null
                                ? `Outlier: ${pct(c.share)} here vs the group's median ${pct(fn.median_share)}`
                                : undefined
                            }
                          >
                            {c ? (
                              <Link
                                to={cellLink(host.id, fn.function_id, data)}
                                aria-label={`${fn.name} on ${host.hostname}: ${(c.share * 100).toFixed(1)}%${c.outlier ? " (outlier)" : ""}`}
                              >
                                {(c.share * 100).toFixed(1)}%
                              </Link>
                            ) : (
                              <span className="muted">·</span>
                            )}
                          </td>
                        );
                      })}
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </>
      )}
    </section>
  );
}

/** The group's outlier hosts over every ranked function (not only the table's page), farthest out first. */
function OutlierPanel({ data }: { data: FleetHotCode }) {
  const rule = data.outlier_rule;
  const busyHosts = data.hosts.filter((h) => h.busy_samples > 0).length;
  return (
    <section className="outlier-panel" aria-labelledby="outlier-hosts">
      <h2 id="outlier-hosts">Outlier hosts</h2>
      <p className="muted small">Listed: {rule.text}.</p>
      {data.outliers.length === 0 ? (
        <p className="muted">
          {busyHosts < rule.min_hosts
            ? `Too few hosts with samples in this range to tell outliers (${busyHosts}; the rule needs ${rule.min_hosts}).`
            : "No outlier host: no function is far hotter on a few hosts than on the rest."}
        </p>
      ) : (
        <table className="grid" aria-label="Outlier hosts">
          <thead>
            <tr>
              <th scope="col">Function</th>
              <th scope="col">Host</th>
              <th scope="col">Share</th>
              <th scope="col">Group median</th>
              <th scope="col">Why</th>
            </tr>
          </thead>
          <tbody>
            {data.outliers.map((o) => (
              <tr key={`${o.function_id}-${o.host_id}`}>
                <th scope="row" className="mono">
                  {o.name} <span className="muted small">{o.module}</span>
                </th>
                <td>
                  <Link to={cellLink(o.host_id, o.function_id, data)} aria-label={`${o.name} on ${o.hostname}`}>
                    {o.hostname}
                  </Link>
                </td>
                <td className="num">{pct(o.share)}</td>
                <td className="num">{pct(o.median_share)}</td>
                <td className="small">{outlierReason(o, rule)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {data.outliers_total > data.outliers.length && (
        <p className="muted small">
          {data.outliers_total - data.outliers.length} more outlier
          {data.outliers_total - data.outliers.length === 1 ? "" : "s"} not listed (the farthest {data.outliers.length}{" "}
          are).
        </p>
      )}
    </section>
  );
}
