// SPDX-License-Identifier: Apache-2.0
// The hottest functions of a host over a recent window, from whole-system PC sampling; refreshed
// when the server pushes a new sample batch.
import { useState } from "react";
import { Link } from "react-router-dom";
import { useTopFunctions } from "../../api/queries";
import { formatCount, formatRate, formatShare } from "../../lib/format";

export const WINDOWS = [5, 10, 60] as const;

export function TopFunctionsView({ hostId }: { hostId: string }) {
  const [windowS, setWindowS] = useState<number>(10);
  const top = useTopFunctions(hostId, windowS);
  const items = top.data?.items ?? [];
  const maxShare = Math.max(0, ...items.map((i) => i.share));
  return (
    <div className="top-functions">
      <div className="toolbar">
        <span className="toolbar-label" id="window-label">Window</span>
        <div role="group" aria-labelledby="window-label" className="segmented">
          {WINDOWS.map((w) => (
            <button key={w} type="button" aria-pressed={windowS === w} onClick={() => setWindowS(w)}>{w} s</button>
          ))}
        </div>
        {top.data && (
          <span className="muted">{formatCount(top.data.total_samples)} samples in the last {top.data.window_s} s</span>
        )}
        {top.isFetching && <span className="muted small">updating…</span>}
      </div>
      {top.isError && <p className="error" role="alert">Could not load top functions: {top.error.message}</p>}
      <table className="grid top" aria-label="Top functions">
        <thead>
          <tr>
            <th scope="col" className="num">#</th>
            <th scope="col">Function</th>
            <th scope="col">Module</th>
            <th scope="col" className="num">Samples/s</th>
            <th scope="col" className="num">Share</th>
            <th scope="col" className="bar-col"><span className="visually-hidden">Share bar</span></th>
          </tr>
        </thead>
        <tbody>
          {top.isPending && (
            <tr><td colSpan={6} className="muted">Loading…</td></tr>
          )}
          {top.data && items.length === 0 && (
            <tr><td colSpan={6} className="muted">No samples in the last {top.data.window_s} s.</td></tr>
          )}
          {items.map((f, i) => (
            <tr key={f.function_id}>
              {/* The spaces keep cell texts apart in the row's text, so names read as whole words. */}
              <td className="num">{i + 1}{" "}</td>
              <td><Link to={`/hosts/${encodeURIComponent(hostId)}/functions/${f.function_id}`}>{f.name}</Link>{" "}</td>
              <td>{f.module}{" "}</td>
              <td className="num">{formatRate(f.samples_per_sec)}{" "}</td>
              <td className="num">{formatShare(f.share)}{" "}</td>
              <td className="bar-col">
                <div className="bar" aria-hidden="true">
                  <div className="bar-fill" style={{ width: `${maxShare > 0 ? (f.share / maxShare) * 100 : 0}%` }} />
                </div>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
