// SPDX-License-Identifier: Apache-2.0
// Two time ranges of a host — or a range of another host — side by side: per function, samples per
// second in the baseline (A) and in the comparison (B) and the change from the baseline (B − A, so
// growth reads as growth), largest change first. Opened from a range, that range becomes the comparison
// and the baseline defaults to the period just before it; the time range above sets the baseline.
// Relative ranges are pinned to absolute times when the view opens, so the link always reproduces the
// same comparison. Shown as a table of functions or as a differential flame graph (drawn by the flame
// feature: the host page passes it in as `diffFlame`, so this feature does not import that one).
import { useEffect, useMemo, type ReactNode } from "react";
import { Link } from "react-router-dom";
import { useCompare, useHosts } from "../../api/queries";
import { formatCount, formatRate, formatShare } from "../../lib/format";
import { formatRange, type TimeRange } from "../../lib/timeRange";
import { rangeSearch, type HostView } from "../../lib/urlState";
import { TimeRangePicker } from "../../shared/TimeRangePicker";
import { describeChange, pinComparison, previousPeriod } from "./compareModel";

/** What the differential flame graph is drawn from: the two ranges and the comparison's host. */
export interface DiffFlameProps {
  a: TimeRange;
  b: TimeRange;
  bHostId: string;
}

export function CompareView({
  hostId,
  view,
  update,
  diffFlame,
}: {
  hostId: string;
  view: HostView;
  update: (patch: Partial<HostView>, options?: { push?: boolean }) => void;
  diffFlame: (p: DiffFlameProps) => ReactNode;
}) {
  const hosts = useHosts();
  const a = view.range;
  const b: TimeRange = view.bRange ?? a;
  // Pin relative ranges (and a defaulted baseline) to absolute times in the URL.
  useEffect(() => {
    if (a.kind === "relative" || view.bRange === null || view.bRange.kind === "relative") {
      const { baseline, comparison } = pinComparison(view.range, view.bRange);
      update({ range: baseline, bRange: comparison }, { push: false });
    }
  }, [a, view.range, view.bRange, update]);

  const query = useMemo(() => {
    if (view.bRange === null || a.kind !== "absolute" || b.kind !== "absolute") return null;
    return {
      a: { from: a.from.toISOString(), to: a.to.toISOString() },
      b: { from: b.from.toISOString(), to: b.to.toISOString() },
      bHost: view.bHost,
      includeIdle: view.idle,
      limit: 200,
    };
  }, [a, b, view.bRange, view.bHost, view.idle]);
  const cmp = useCompare(hostId, view.compareView === "table" ? query : null);
  const bHostId = view.bHost ?? hostId;

  return (
    <div className="compare">
      <div className="compare-ranges">
        <div data-testid="compare-baseline">
          <strong>Baseline (A)</strong>, this host: {formatRange(a)}{" "}
          <span className="muted small">— set it with the time range above or by brushing the chart</span>
        </div>
        <div className="toolbar">
          <TimeRangePicker label="Comparison (B)" range={b} onChange={(r) => update({ bRange: r }, { push: true })} />
          <label className="inline-label">
            Host of the comparison{" "}
            <select
              value={bHostId}
              onChange={(e) => update({ bHost: e.target.value === hostId ? null : e.target.value }, { push: true })}
            >
              {(hosts.data ?? []).map((h) => (
                <option key={h.id} value={h.id}>
                  {h.hostname}
                  {h.id === hostId ? " (this host)" : ""}
                </option>
              ))}
            </select>
          </label>
          <button type="button" onClick={() => update({ range: previousPeriod(b) }, { push: true })}>
            Baseline = period before the comparison
          </button>
          <label className="inline-label">
            <input
              type="checkbox"
              checked={view.idle}
              onChange={(e) => update({ idle: e.target.checked }, { push: true })}
            />
            include idle-loop functions
          </label>
        </div>
      </div>
      <span className="segmented" role="group" aria-label="Comparison view">
        <button
          type="button"
          aria-pressed={view.compareView === "table"}
          onClick={() => update({ compareView: "table" }, { push: true })}
        >
          Functions table
        </button>
        <button
          type="button"
          aria-pressed={view.compareView === "flame"}
          onClick={() => update({ compareView: "flame" }, { push: true })}
        >
          Differential flame graph
        </button>
      </span>
      {view.compareView === "flame" && diffFlame({ a, b, bHostId })}
      {view.compareView === "table" && (
        <>
          {cmp.isError && (
            <p className="error" role="alert">
              Could not compare: {cmp.error.message}
            </p>
          )}
          {cmp.data && (
            <p className="muted" data-testid="compare-totals">
              Baseline (A): {formatCount(cmp.data.a.total_samples)} samples over {Math.round(cmp.data.a.seconds)} s ·
              comparison (B): {formatCount(cmp.data.b.total_samples)} samples over {Math.round(cmp.data.b.seconds)} s ·{" "}
              {formatCount(cmp.data.functions)} functions had samples in either
            </p>
          )}
          <table className="grid compare-table" aria-label="Compared functions" aria-busy={cmp.isFetching}>
            <thead>
              <tr>
                <th scope="col">Function</th>
                <th scope="col">Module</th>
                <th scope="col" className="num">
                  Baseline (A) samples/s
                </th>
                <th scope="col" className="num">
                  Comparison (B) samples/s
                </th>
                <th
                  scope="col"
                  className="num"
                  aria-sort="descending"
                  title="comparison − baseline: + where the function got hotter"
                >
                  Change (B − A, /s)
                </th>
                <th scope="col" className="num">
                  Baseline share
                </th>
                <th scope="col" className="num">
                  Comparison share
                </th>
              </tr>
            </thead>
            <tbody>
              {cmp.isPending && query && (
                <tr>
                  <td colSpan={7} className="muted">
                    Comparing…
                  </td>
                </tr>
              )}
              {cmp.data && cmp.data.items.length === 0 && (
                <tr>
                  <td colSpan={7} className="muted">
                    Neither range has kernel samples.
                  </td>
                </tr>
              )}
              {cmp.data?.items.map((it) => {
                const fid = it.b_function_id ?? (view.bHost ? null : it.a_function_id);
                const change = describeChange(it.a_per_sec, it.b_per_sec, formatRate);
                return (
                  <tr key={`${it.module}:${it.name}`}>
                    <td>
                      {fid !== null && fid !== undefined ? (
                        <Link to={`/hosts/${encodeURIComponent(bHostId)}/functions/${fid}?${rangeSearch(b)}`}>
                          {it.name}
                        </Link>
                      ) : (
                        it.name
                      )}
                      {it.idle && <span className="badge idle">idle</span>}{" "}
                    </td>
                    <td>{it.module} </td>
                    <td className="num">{formatRate(it.a_per_sec)} </td>
                    <td className="num">{formatRate(it.b_per_sec)} </td>
                    <td
                      className={`num delta ${change.direction === "grew" ? "up" : change.direction === "shrank" ? "down" : ""}`}
                      title={`${change.direction} from the baseline to the comparison`}
                    >
                      {change.text}{" "}
                    </td>
                    <td className="num">{formatShare(it.a_share)} </td>
                    <td className="num">{formatShare(it.b_share)}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </>
      )}
    </div>
  );
}
