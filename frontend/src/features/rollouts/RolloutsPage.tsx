// SPDX-License-Identifier: Apache-2.0
// Every staged roll-out, newest first: when, which plan, how many hosts, its state and reason; each opens
// its page. A roll-out is started from its approved plan's page (RolloutPanel.tsx).
import { Link } from "react-router-dom";
import { useRollouts } from "../../api/rolloutQueries";
import type { Rollout } from "../../api/types";
import { ROLLOUT_STATE_TEXT } from "./rolloutModel";

export function RolloutsPage() {
  const list = useRollouts(null);
  return (
    <section className="rollouts">
      <div className="page-head">
        <h1>Roll-outs</h1>
      </div>
      <p className="muted">
        An approved plan is rolled out to every host of its build from the plan&apos;s page: a canary host first, then
        growing waves, each host guarded.
      </p>
      {list.isPending && <p className="muted">Loading roll-outs…</p>}
      {list.isError && (
        <p className="error" role="alert">
          Could not load the roll-outs: {list.error.message}
        </p>
      )}
      {list.data && list.data.length === 0 && <p className="muted">No roll-out yet.</p>}
      {list.data && list.data.length > 0 && <RolloutTable rollouts={list.data} label="Roll-outs" />}
    </section>
  );
}

/** Roll-outs as rows (also the plan page's list of its own). */
export function RolloutTable({ rollouts, label }: { rollouts: Rollout[]; label: string }) {
  return (
    <table className="data" aria-label={label}>
      <thead>
        <tr>
          <th>Started</th>
          <th>Plan</th>
          <th>Hosts</th>
          <th>State</th>
          <th>Reason</th>
          <th>By</th>
        </tr>
      </thead>
      <tbody>
        {rollouts.map((r) => (
          <tr key={r.id}>
            <td>
              <Link to={`/rollouts/${r.id}`}>{new Date(r.created_at).toLocaleString()}</Link>
            </td>
            <td>
              <Link to={`/hosts/${encodeURIComponent(r.plan_host_id)}/plans/${r.plan_id}`}>
                {r.kind} plan {r.plan_id.slice(0, 8)}
              </Link>
            </td>
            <td>{r.host_count}</td>
            <td className={`rollout-state ${r.state}`}>{ROLLOUT_STATE_TEXT[r.state]}</td>
            <td>{r.reason ?? ""}</td>
            <td>{r.requested_by}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
