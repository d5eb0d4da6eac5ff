// SPDX-License-Identifier: Apache-2.0
// Who called a function and what it called, from the call stacks sampled in the range (not from its
// code): each with the samples of the stacks where it was the caller or callee, and per call site the
// callees observed there — for an indirect call site, its observed targets.
import { Link } from "react-router-dom";
import { useFunctionCalls } from "../../api/queries";
import type { CallPeer } from "../../api/types";
import { formatOffset } from "../../lib/address";
import { formatCount, formatShare } from "../../lib/format";
import { formatRange, type TimeRange } from "../../lib/timeRange";
import { rangeSearch } from "../../lib/urlState";

const FILTER = { pid: null, comm: null, cpu: null, idle: "include" as const };

function PeerList({
  peers,
  total,
  hostId,
  range,
  label,
}: {
  peers: CallPeer[];
  total: number;
  hostId: string;
  range: TimeRange;
  label: string;
}) {
  if (peers.length === 0) return <p className="muted">None in the range's stacks.</p>;
  return (
    <table className="grid calls" aria-label={label}>
      <thead>
        <tr>
          <th scope="col">Function</th>
          <th scope="col">Module</th>
          <th scope="col" className="num">
            Samples
          </th>
          <th scope="col" className="num">
            Share
          </th>
        </tr>
      </thead>
      <tbody>
        {peers.map((p) => (
          <tr key={`${p.kind}:${p.module}:${p.name}`}>
            <td className="addr">
              {p.function_id !== null && p.function_id !== undefined ? (
                <Link to={`/hosts/${encodeURIComponent(hostId)}/functions/${p.function_id}?${rangeSearch(range)}`}>
                  {p.name}
                </Link>
              ) : (
                p.name
              )}{" "}
            </td>
            <td className="muted">{p.module} </td>
            <td className="num">{formatCount(p.samples)} </td>
            <td className="num">{formatShare(total ? p.samples / total : 0)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function CallersCallees({
  hostId,
  functionId,
  range,
  live,
}: {
  hostId: string;
  functionId: number;
  range: TimeRange;
  live: boolean;
}) {
  const calls = useFunctionCalls(hostId, functionId, range, live, FILTER);
  const c = calls.data;
  const indirect = c?.call_sites.filter((s) => s.indirect && s.callees.length > 0) ?? [];
  return (
    <section className="callers-callees" id="calls" aria-labelledby="calls-title">
      <h2 id="calls-title">Callers and callees (from call stacks, {formatRange(range)})</h2>
      {calls.isError && <p className="error">Stacks unavailable: {calls.error.message}</p>}
      {calls.isPending && <p className="muted">Loading stacks…</p>}
      {c && (
        <p className="muted" data-testid="calls-summary">
          In {formatCount(c.inclusive_samples)} of {formatCount(c.samples)} sampled stacks (
          {formatShare(c.samples ? c.inclusive_samples / c.samples : 0)}), {formatCount(c.self_samples)} in its own code
        </p>
      )}
      {c && c.samples > 0 && (
        <div className="calls-grid">
          <div>
            <h3>Callers</h3>
            <PeerList peers={c.callers} total={c.inclusive_samples} hostId={hostId} range={range} label="Callers" />
          </div>
          <div>
            <h3>Callees</h3>
            <PeerList peers={c.callees} total={c.inclusive_samples} hostId={hostId} range={range} label="Callees" />
          </div>
        </div>
      )}
      {indirect.length > 0 && (
        <>
          <h3>Observed targets of indirect call sites</h3>
          {indirect.map((s) => (
            <div key={s.site_offset} className="indirect-site">
              <span className="addr">call at {formatOffset(s.site_offset)}</span>
              <PeerList
                peers={s.callees}
                total={c!.inclusive_samples}
                hostId={hostId}
                range={range}
                label={`Targets of the call at ${formatOffset(s.site_offset)}`}
              />
            </div>
          ))}
        </>
      )}
    </section>
  );
}
