// SPDX-License-Identifier: Apache-2.0
// One staged roll-out of an approved plan (issue 19): its state and reason (why it halted: the guard's
// figures on the host it reverted), its progress, the operator's pause, resume and revert everywhere, the
// hosts that need attention (reverted, failed, skipped) first, then each wave with its hosts (state,
// reason, the guard's verdict with its interval, the per-host plan), and the audit trail. Polled every
// 2 s while it runs; a large wave's host table opens on demand, so a 1,000-host roll-out renders only
// what is looked at.
import { Link, useParams } from "react-router-dom";
import { ApiError } from "../../api/client";
import { useMe } from "../../api/queries";
import { useRollout, useRolloutAction, useRolloutAudit, type RolloutAction } from "../../api/rolloutQueries";
import type { RolloutDetail, RolloutHost } from "../../api/types";
import { useAuth } from "../../shared/AuthContext";
import { isUuid } from "../../lib/ids";
import {
  actionRules,
  guardText,
  HOST_STATE_TEXT,
  hostsOfWave,
  progress,
  ROLLOUT_STATE_TEXT,
  statesText,
} from "./rolloutModel";

/** A wave with more hosts than this starts folded. */
const OPEN_WAVE_HOSTS = 50;

export function RolloutPage() {
  const { rolloutId = "" } = useParams();
  const wellFormed = isUuid(rolloutId);
  const r = useRollout(rolloutId, wellFormed);
  const notFound = !wellFormed || (r.error instanceof ApiError && r.error.status === 404);
  if (notFound || r.isError) {
    return (
      <section className="notice">
        <h1>{notFound ? "Roll-out not found" : "Roll-out not available"}</h1>
        <p className="error" role="alert">
          {!wellFormed
            ? `“${rolloutId}” is not a roll-out id: roll-out ids look like 0b6f4c1e-8a3d-4f7a-9c2e-5d1b7e9a4f20.`
            : notFound
              ? `There is no roll-out ${rolloutId}.`
              : r.error?.message}
        </p>
        <p>
          <Link to="/rollouts">All roll-outs</Link>
        </p>
      </section>
    );
  }
  if (!r.data) return <p className="muted">Loading roll-out…</p>;
  return <RolloutBody r={r.data} />;
}

function RolloutBody({ r }: { r: RolloutDetail }) {
  const p = progress(r);
  const attention = r.hosts.filter((h) => h.state === "reverted" || h.state === "failed" || h.state === "skipped");
  const planLink = `/hosts/${encodeURIComponent(r.plan_host_id)}/plans/${r.plan_id}`;
  return (
    <section className="rollout-page">
      <p className="crumbs">
        <Link to={planLink}>← plan</Link> · <Link to="/rollouts">all roll-outs</Link>
      </p>
      <h1>Roll-out of a {r.kind} plan</h1>
      <dl className="facts">
        <div>
          <dt>State</dt>
          <dd data-testid="rollout-state" className={`rollout-state ${r.state}`}>
            {ROLLOUT_STATE_TEXT[r.state]}
          </dd>
        </div>
        <div>
          <dt>Hosts</dt>
          <dd>
            {r.host_count} of build <span className="addr">{r.build_id.slice(0, 16)}</span>
            {Object.keys(r.labels).length > 0 && <> with {labelList(r.labels)}</>}
          </dd>
        </div>
        <div>
          <dt>Code hash</dt>
          <dd className="addr" title={r.code_sha256}>
            {r.code_sha256.slice(0, 16)}…
          </dd>
        </div>
        <div>
          <dt>Started</dt>
          <dd>
            by {r.requested_by} at {new Date(r.created_at).toLocaleString()}
            {r.finished_at && <>, ended {new Date(r.finished_at).toLocaleString()}</>}
          </dd>
        </div>
        <div>
          <dt>Waves</dt>
          <dd>{r.wave_sizes.join(", ")}</dd>
        </div>
        <div>
          <dt>Guard</dt>
          <dd>
            {r.kind === "process"
              ? `${r.guard_pairs ?? "?"} pairs of ${r.guard_window_seconds ?? "?"} s windows on every host; a slower host is reverted and halts the roll-out`
              : "kernel plans: the before/after windows on every host"}
          </dd>
        </div>
      </dl>
      {r.reason && (
        <p
          className={r.state === "halted" ? "error" : "muted"}
          role={r.state === "halted" ? "alert" : undefined}
          data-testid="rollout-reason"
        >
          {r.state === "halted" ? "Halted: " : ""}
          {r.reason}
        </p>
      )}
      <div className="rollout-progress" role="status" aria-live="polite">
        <progress max={Math.max(1, p.total)} value={p.done} aria-label="Roll-out progress" />{" "}
        <span data-testid="rollout-progress">
          {p.done} of {p.total} hosts answered{p.total ? `: ${statesText(p.byState)}` : ""}
        </span>
      </div>
      <Actions r={r} />
      {attention.length > 0 && (
        <section aria-labelledby="attention-title">
          <h2 id="attention-title">Needs attention</h2>
          <HostTable hosts={attention} label="Hosts that need attention" />
        </section>
      )}
      <section aria-labelledby="waves-title">
        <h2 id="waves-title">Waves</h2>
        {r.waves.map((w) => {
          const hosts = hostsOfWave(r.hosts, w.wave);
          const title = `${w.wave === 0 ? "Canary" : `Wave ${w.wave}`} · ${w.size} host${w.size === 1 ? "" : "s"}`;
          return (
            <details key={w.wave} className="rollout-wave" open={hosts.length <= OPEN_WAVE_HOSTS}>
              <summary>
                {title}
                {Object.keys(w.states).length > 0 && <span className="muted"> · {statesText(w.states)}</span>}
                {w.wave === r.wave && r.state === "running" && <span className="muted"> · current wave</span>}
              </summary>
              <HostTable hosts={hosts} label={title} />
            </details>
          );
        })}
      </section>
      <AuditTrail r={r} answered={p.done} />
    </section>
  );
}

function labelList(labels: Record<string, unknown>) {
  return Object.entries(labels)
    .map(([k, v]) => `${k}=${String(v)}`)
    .join(", ");
}

function Actions({ r }: { r: RolloutDetail }) {
  const { session } = useAuth();
  const me = useMe(!!session).data ?? session?.user;
  const act = useRolloutAction(r.id);
  const rules = actionRules(r.state, me?.role ?? "viewer");
  const button = (a: RolloutAction, label: string) => (
    <button
      type="button"
      disabled={!rules[a].ok || act.isPending}
      title={rules[a].ok ? "" : rules[a].why}
      onClick={() => act.mutate(a)}
    >
      {label}
    </button>
  );
  return (
    <div className="toolbar">
      {button("pause", "Pause")}
      {button("resume", "Resume")}
      {button("revert", "Revert everywhere")}
      {act.isError && (
        <span className="error" role="alert">
          {act.error.message}
        </span>
      )}
    </div>
  );
}

function HostTable({ hosts, label }: { hosts: RolloutHost[]; label: string }) {
  return (
    <table className="data rollout-hosts" aria-label={label}>
      <thead>
        <tr>
          <th>Host</th>
          <th>State</th>
          <th>Guard</th>
          <th>Reason</th>
          <th>Plan</th>
        </tr>
      </thead>
      <tbody>
        {hosts.map((h) => (
          <tr key={h.host_id} data-host={h.host_id}>
            <td>
              <Link to={`/hosts/${encodeURIComponent(h.host_id)}`}>{h.hostname}</Link>
              {!h.online && <span className="muted"> offline</span>}
            </td>
            <td className={`rollout-host-state ${h.state}`}>{HOST_STATE_TEXT[h.state]}</td>
            <td>{guardText(h.guard)}</td>
            <td>{h.reason ?? ""}</td>
            <td>
              {h.plan_id ? (
                <Link to={`/hosts/${encodeURIComponent(h.host_id)}/plans/${h.plan_id}`}>{h.plan_state ?? "plan"}</Link>
              ) : (
                "—"
              )}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function AuditTrail({ r, answered }: { r: RolloutDetail; answered: number }) {
  const audit = useRolloutAudit(r.id, `${r.state}|${r.updated_at}|${answered}`);
  return (
    <section aria-labelledby="ro-audit-title">
      <h2 id="ro-audit-title">Audit trail</h2>
      {audit.isError && <p className="error">The audit trail could not be read: {audit.error.message}</p>}
      <table className="data" data-testid="rollout-audit">
        <thead>
          <tr>
            <th>When</th>
            <th>Who</th>
            <th>What</th>
            <th>Detail</th>
          </tr>
        </thead>
        <tbody>
          {(audit.data ?? []).map((a, i) => (
            <tr key={i}>
              <td>{new Date(a.at).toLocaleString()}</td>
              <td>{a.actor}</td>
              <td>{a.action.replace(/^rollout_|^plan_/, "").replace(/_/g, " ")}</td>
              <td className="small">{auditDetail(a.detail)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

/** The audit detail's fields that say something (not the roll-out's own id, nor empty ones), as "key: value". */
function auditDetail(d: Record<string, unknown>): string {
  return Object.entries(d)
    .filter(([k, v]) => k !== "rollout_id" && v !== null && v !== undefined)
    .map(([k, v]) => `${k.replace(/_/g, " ")}: ${typeof v === "string" ? v : JSON.stringify(v)}`)
    .join("; ");
}
