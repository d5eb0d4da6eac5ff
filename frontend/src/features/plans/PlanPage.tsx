// SPDX-License-Identifier: Apache-2.0
// A plan of a host: while the agent makes it, its progress; then the I-cache heatmaps before and after,
// the footprint figures, the chain table, each group function's blocks in their new order coloured
// hot/cold with their chains and their control-flow graphs coloured the same way (PlanCode.tsx), the
// functions kept in place with their rules, the emitted code beside a member's original; and the
// approval workflow (request, approve or reject by another approver, install with or without the guard,
// revert) with who did what, the interleaved before/after of an installed process plan (Interleaved.tsx:
// the sampled share of the plan's code, original against installed, with its interval; compare again),
// the root's uprobe-timed figures before and after the install (a secondary detail: instrumented), and
// what the route adds after the workflow (pages/PlanRoute.tsx: the plan's roll-outs to the fleet), and the
// plan's audit trail.
import { Link, useParams } from "react-router-dom";
import { useState, type ReactNode } from "react";
import {
  useCommandPolledWhile,
  useMe,
  usePlan,
  usePlanAudit,
  usePlanBody,
  usePlanStep,
  type PlanStep,
} from "../../api/queries";
import { useCancelCommand } from "../../api/measureQueries";
import type { PlanDetail } from "../../api/types";
import { ApiError } from "../../api/client";
import { useLiveTopics } from "../../api/live";
import { beforeAfterRows, planRefreshMs, windowText, type Cell } from "./beforeAfter";
import { useAuth } from "../../shared/AuthContext";
import { HeatLegend, Heatmap } from "./Heatmap";
import { Interleaved } from "./Interleaved";
import { CodeSideBySide, MemberCfgs } from "./PlanCode";
import { takenChange, type MemberView, type PlanView } from "./planModel";
import { usePlanView } from "./usePlanView";
import { isPlanId, nextStep, stepRules } from "./workflowModel";

/** `afterWorkflow`: what the route shows below the approval workflow (another feature's section). */
export function PlanPage({ afterWorkflow }: { afterWorkflow?: (hostId: string, plan: PlanDetail) => ReactNode }) {
  const { hostId = "", planId = "" } = useParams();
  const wellFormed = isPlanId(planId);
  // Plan state changes are pushed on the host's topic (approvals show at once, not at the next poll).
  useLiveTopics([`host:${hostId}`]);
  const plan = usePlan(hostId, planId, wellFormed, planRefreshMs);
  const notFound = !wellFormed || (plan.error instanceof ApiError && plan.error.status === 404);
  if (notFound || plan.isError) {
    return (
      <section className="notice">
        <h1>{notFound ? "Plan not found" : "Plan not available"}</h1>
        <p className="error" role="alert">
          {!wellFormed
            ? `“${planId}” is not a plan id: plan ids look like 0b6f4c1e-8a3d-4f7a-9c2e-5d1b7e9a4f20.`
            : notFound
              ? `This host has no plan ${planId}.`
              : plan.error?.message}
        </p>
        <p>
          <Link to={`/hosts/${encodeURIComponent(hostId)}`}>Back to the host</Link>
        </p>
      </section>
    );
  }
  if (!plan.data) return <p className="muted">Loading plan…</p>;
  return <PlanBody hostId={hostId} plan={plan.data} afterWorkflow={afterWorkflow} />;
}

/** What the plan covers: a whole hot set (its functions, those kept in place once its body is shaped)
 *  or one root's group. */
export function planKind(plan: PlanDetail, view: PlanView | null): string {
  if (!plan.hot_set) return "one root and its hot callees";
  if (!plan.body_etag) return "whole hot set (being sampled and planned)";
  const made = `whole hot set: ${plan.members.length} functions, first laid out ${plan.root_name}`;
  return view ? `${made}; ${view.kept.length} kept in place` : made;
}

function PlanBody({
  hostId,
  plan,
  afterWorkflow,
}: {
  hostId: string;
  plan: PlanDetail;
  afterWorkflow?: (hostId: string, plan: PlanDetail) => ReactNode;
}) {
  // The record is polled; the body (up to 16 MiB) is read once per version and shaped in a worker.
  const body = usePlanBody(hostId, plan.id, plan.body_etag);
  const shaped = usePlanView(body.data, plan.estimated);
  const make = useCommandPolledWhile(hostId, plan.make_command, plan.state === "planning");
  return (
    <section className="plan-page">
      <p className="crumbs">
        <Link to={`/hosts/${encodeURIComponent(hostId)}`}>← host</Link>
      </p>
      <h1>{plan.hot_set ? `Hot set of ${plan.target_id}` : `Plan for ${plan.root_name}`}</h1>
      <dl className="facts">
        <div>
          <dt>Kind</dt>
          <dd data-testid="plan-kind">{planKind(plan, shaped.view)}</dd>
        </div>
        <div>
          <dt>State</dt>
          <dd data-testid="plan-state" className={`plan-state ${plan.state}`}>
            {plan.state}
          </dd>
        </div>
        <div>
          <dt>Target</dt>
          <dd>{plan.target_id}</dd>
        </div>
        <div>
          <dt>Code hash</dt>
          <dd className="addr" title={plan.code_sha256 ?? ""}>
            {plan.code_sha256 ? plan.code_sha256.slice(0, 16) + "…" : "—"}
          </dd>
        </div>
        <div>
          <dt>Build id</dt>
          <dd className="addr">{plan.build_id ?? "—"}</dd>
        </div>
        <div>
          <dt>Counts</dt>
          <dd>
            {plan.estimated ? (
              <span className="estimate">estimated (sampled)</span>
            ) : shaped.view ? (
              <span title={shaped.view.countsSource}>{shaped.view.counts}</span>
            ) : (
              "—"
            )}
          </dd>
        </div>
      </dl>
      {plan.state === "planning" && (
        <div className="layout-progress" role="status" aria-live="polite">
          <p>The agent is measuring and planning… {make.data?.message ?? make.data?.state ?? ""}</p>
          <progress max={1} value={make.data?.progress ?? undefined} aria-label="Plan progress" />
        </div>
      )}
      {plan.error && (
        <p className="error" role="alert">
          {plan.error}
        </p>
      )}
      {plan.stale_reason && (
        <p className="warning" role="note">
          Stale: {plan.stale_reason}
        </p>
      )}
      <Workflow hostId={hostId} plan={plan} />
      {afterWorkflow?.(hostId, plan)}
      <InterleavedSection hostId={hostId} plan={plan} />
      <Comparison plan={plan} />
      {(shaped.error ?? body.error) && (
        <p className="error" role="alert">
          The plan could not be shown: {shaped.error ?? body.error?.message}
        </p>
      )}
      {shaped.view && <PlanFigures view={shaped.view} hostId={hostId} target={plan.target_id} />}
      <AuditTrail hostId={hostId} plan={plan} />
    </section>
  );
}

function Workflow({ hostId, plan }: { hostId: string; plan: PlanDetail }) {
  const { session } = useAuth();
  const me = useMe(!!session).data ?? session?.user;
  const step = usePlanStep(hostId, plan.id);
  const [reason, setReason] = useState("");
  const [guard, setGuard] = useState(true);
  const process = plan.target_id !== "kernel";
  const own = me?.username === plan.requested_by;
  const made = me?.username === plan.created_by;
  const can = stepRules(plan.state, me?.role ?? "viewer", own, made);
  const primary = nextStep(plan.state, can);
  const button = (s: PlanStep, label: string) => (
    <button
      type="button"
      className={s === primary ? "primary" : undefined}
      disabled={!can[s].ok || step.isPending}
      title={can[s].ok ? "" : can[s].why}
      onClick={() => step.mutate({ step: s, reason, window_s: INSTALL_WINDOW_S, guard: guard && process })}
    >
      {label}
    </button>
  );
  return (
    <section className="plan-workflow" aria-labelledby="wf-title">
      <h2 id="wf-title">Approval and install</h2>
      <ol className="wf-steps">
        <li>
          Made by {plan.created_by} {when(plan.created_at)}
        </li>
        {plan.requested_by && (
          <li>
            Requested by {plan.requested_by} {when(plan.requested_at)}
          </li>
        )}
        {plan.approved_by && (
          <li>
            Approved by {plan.approved_by} {when(plan.approved_at)} (code {plan.approved_code_sha256?.slice(0, 12)}…,
            build {plan.approved_build_id?.slice(0, 12)}…)
          </li>
        )}
        {plan.rejected_by && (
          <li>
            Rejected by {plan.rejected_by} {when(plan.rejected_at)}
            {plan.reject_reason ? `: ${plan.reject_reason}` : ""}
          </li>
        )}
        {plan.install_by && (
          <li>
            Install by {plan.install_by}
            {plan.installed_at ? `, installed ${when(plan.installed_at)}` : ""}
          </li>
        )}
        {plan.revert_by && (
          <li data-testid="revert-by">
            Revert by {plan.revert_by}
            {plan.reverted_at ? `, reverted ${when(plan.reverted_at)}` : ""}
            {plan.revert_by === "system" && plan.interleaved?.guard_action === "reverted"
              ? ` (${plan.interleaved.guard_reason})`
              : ""}
          </li>
        )}
      </ol>
      <div className="toolbar">
        {button("request", "Request approval")}
        {button("approve", "Approve")}
        <input
          aria-label="Reason to reject"
          placeholder="reason (reject)"
          value={reason}
          onChange={(e) => setReason(e.target.value)}
        />
        {button("reject", "Reject")}
        {process && (
          <label title="Compare the plan with the original code right after the install, and revert it if slower">
            <input
              type="checkbox"
              checked={guard}
              disabled={!can.install.ok}
              onChange={(e) => setGuard(e.target.checked)}
            />{" "}
            Guard: revert if slower
          </label>
        )}
        {button("install", "Install")}
        {button("revert", "Revert")}
      </div>
      {step.isError && (
        <p className="error" role="alert">
          {step.error.message}
        </p>
      )}
    </section>
  );
}

/** The latest interleaved comparison, "Compare again" for those who may install (process plans), and
 * while one runs, its cancel (the agent puts the plan back first; a comparison sent to an agent that is
 * away would otherwise wait for it, holding "Compare again"). */
function InterleavedSection({ hostId, plan }: { hostId: string; plan: PlanDetail }) {
  const { session } = useAuth();
  const me = useMe(!!session).data ?? session?.user;
  const step = usePlanStep(hostId, plan.id);
  const cancel = useCancelCommand(hostId);
  if (plan.target_id === "kernel") return null;
  const running = plan.interleaved?.state === "running";
  const role = me?.role ?? "viewer";
  const rule = stepRules(plan.state, role, false).compare;
  const again = (
    <div className="toolbar">
      <button
        type="button"
        disabled={!rule.ok || running || step.isPending}
        title={running ? "a comparison is running" : rule.ok ? "" : rule.why}
        onClick={() => step.mutate({ step: "compare" })}
      >
        {plan.interleaved ? "Compare again" : "Compare with the original"}
      </button>
      {running && role !== "viewer" && plan.interleaved && (
        <button
          type="button"
          disabled={cancel.isPending}
          title="stop the comparison: the agent installs the plan again first"
          onClick={() => plan.interleaved && cancel.mutate(plan.interleaved.command_id)}
        >
          Cancel comparison
        </button>
      )}
      {[step, cancel].map(
        (m, i) =>
          m.isError && (
            <span key={i} className="error" role="alert">
              {m.error.message}
            </span>
          ),
      )}
    </div>
  );
  if (!plan.interleaved) return plan.state === "installed" ? <section>{again}</section> : null;
  return <Interleaved c={plan.interleaved} actions={again} />;
}

/** The before and after windows of an install, in seconds (docs/plans.md: five seconds each). */
const INSTALL_WINDOW_S = 5;

function when(t: string | null | undefined) {
  return t ? `at ${new Date(t).toLocaleString()}` : "";
}

function Comparison({ plan }: { plan: PlanDetail }) {
  const rows = beforeAfterRows(plan);
  if (!rows.length) return null;
  const c = plan.comparison!;
  const td = (x: Cell) => (
    <td className={x.unavailable ? "unavailable" : undefined} title={x.unavailable ?? x.emulated}>
      {x.text}
    </td>
  );
  return (
    <section aria-labelledby="cmp-title">
      <h2 id="cmp-title">{plan.root_name} before and after the install</h2>
      <p className="muted small">
        Probe-timed windows of the root (uprobes in a process; kprobes or BPF trampolines in the kernel): instrumented,
        so per-call times include the probes&apos; cost (kept as a detail; the interleaved comparison above is the
        measure of a process plan).
      </p>
      {c.emulated && (
        <p className="estimate" data-testid="emulated">
          {c.emulated}
        </p>
      )}
      <table className="data" data-testid="before-after">
        <thead>
          <tr>
            <th />
            <th>Before</th>
            <th>After</th>
            <th>Change</th>
            <th>Spread over 1 s intervals (before → after)</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={r.key}>
              <th scope="row">{r.label}</th>
              {r.key === "hardware" ? (
                <td colSpan={4} className="unavailable">
                  {r.before.text}
                </td>
              ) : (
                <>
                  {td(r.before)}
                  {td(r.after)}
                  <td>{r.change}</td>
                  <td className="muted">{r.spread}</td>
                </>
              )}
            </tr>
          ))}
          <tr>
            <th scope="row">Window</th>
            <td>{windowText(c.before)}</td>
            <td>{windowText(c.after)}</td>
            <td />
            <td />
          </tr>
        </tbody>
      </table>
    </section>
  );
}

function PlanFigures({ view, hostId, target }: { view: PlanView; hostId: string; target: string }) {
  return (
    <>
      {view.status !== "ok" && (
        <p className="warning" role="note">
          No plan ({view.status}): {view.message}
        </p>
      )}
      {view.bottleneck && <p className="muted small">Bottleneck check: {view.bottleneck}</p>}
      {view.estimated && (
        <p className="estimate" role="note">
          Block counts were sampled: counts, chains and hot lines are estimates.
        </p>
      )}
      {view.before && view.after && (
        <section aria-labelledby="ic-title">
          <h2 id="ic-title">I-cache footprint</h2>
          <div className="heatmaps">
            <Heatmap title="Before" grid={view.before} testId="heatmap-before" />
            <Heatmap title="After" grid={view.after} testId="heatmap-after" />
          </div>
          <HeatLegend lineBytes={view.before.lineBytes} ways={view.before.ways} />
          <table className="data" data-testid="footprint">
            <thead>
              <tr>
                <th />
                <th>Hot lines</th>
                <th>Minimum</th>
                <th>Ratio</th>
                <th>Distance</th>
                <th>Conflicting sets</th>
              </tr>
            </thead>
            <tbody>
              {[
                ["Before", view.before],
                ["After", view.after],
              ].map(([l, g]) => {
                const grid = g as typeof view.before;
                return (
                  <tr key={l as string}>
                    <th scope="row">{l as string}</th>
                    <td>{grid.hotLines}</td>
                    <td>{grid.minimum}</td>
                    <td>{grid.ratio.toFixed(2)}</td>
                    <td>{grid.distance}</td>
                    <td>{grid.conflictSets}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </section>
      )}
      <section aria-labelledby="group-title">
        <h2 id="group-title">Group ({view.members.length} functions)</h2>
        <table className="data">
          <thead>
            <tr>
              <th>Function</th>
              <th>Hot bytes</th>
              <th>Chains</th>
              <th>Cold bytes</th>
              <th>Jump tables</th>
              <th>New hot</th>
              <th>New cold</th>
              <th>Block layout</th>
              <th title="Edges whose target does not start where the source ends, summed by count: computed from the counts and each layout, not measured">
                Taken branches, computed{view.estimated ? " (estimate)" : ""}
              </th>
            </tr>
          </thead>
          <tbody>
            {view.members.map((m) => (
              <tr key={m.fn}>
                <td>{m.fn}</td>
                <td>{m.hotBytes}</td>
                <td>{m.chains}</td>
                <td>{m.coldBytes}</td>
                <td>{m.jumpTableBytes}</td>
                <td>{m.newHotBytes}</td>
                <td>{m.newColdBytes}</td>
                <td>{m.blockLayout === "ext-tsp" ? "ext-TSP" : "Pettis-Hansen"}</td>
                <td>{takenChange(m.takenBefore, m.takenAfter)}</td>
              </tr>
            ))}
            <tr className="totals">
              <th scope="row">Totals</th>
              <td>{view.totals.hot_bytes}</td>
              <td />
              <td>{view.totals.cold_bytes}</td>
              <td>{view.totals.jump_table_bytes}</td>
              <td>{view.totals.new_hot_bytes}</td>
              <td>{view.totals.new_cold_bytes}</td>
              <td />
              <td data-testid="taken-total">
                {takenChange(view.totals.taken_branches_before ?? 0, view.totals.taken_branches_after ?? 0)}
              </td>
            </tr>
          </tbody>
        </table>
        {view.members.map((m) => (
          <LayoutStrip key={m.fn} m={m} />
        ))}
      </section>
      <MemberCfgs hostId={hostId} target={target} members={view.members} />
      <section aria-labelledby="chains-title">
        <h2 id="chains-title">Chains</h2>
        <table className="data" data-testid="chain-table">
          <thead>
            <tr>
              <th>Function</th>
              <th>Chain</th>
              <th>Bytes</th>
              <th>Weight{view.estimated ? " (estimate)" : ""}</th>
              <th>Blocks</th>
            </tr>
          </thead>
          <tbody>
            {view.chains.slice(0, 500).map((c) => (
              <tr key={`${c.fn}:${c.chain}`}>
                <td>{c.fn}</td>
                <td>{c.chain}</td>
                <td>{c.bytes}</td>
                <td>{c.weight}</td>
                <td className="addr">{c.blocks}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </section>
      <section aria-labelledby="kept-title">
        <h2 id="kept-title">Kept in place</h2>
        {view.kept.length === 0 ? (
          <p className="muted">Every hot callee moves with the group.</p>
        ) : (
          <table className="data" data-testid="kept">
            <thead>
              <tr>
                <th>Function</th>
                <th>Address</th>
                <th>Rule</th>
                <th>Detail</th>
              </tr>
            </thead>
            <tbody>
              {view.kept.map((k) => (
                <tr key={k.fn + k.address}>
                  <td>{k.fn}</td>
                  <td className="addr">{k.address}</td>
                  <td>{k.rule}</td>
                  <td>{k.detail}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>
      <section aria-labelledby="code-title">
        <h2 id="code-title">
          Emitted code ({view.codeBytes} bytes, {view.verified ? "verified" : "NOT verified"})
        </h2>
        {view.listing ? (
          <CodeSideBySide hostId={hostId} target={target} members={view.members} listing={view.listing} />
        ) : (
          <>
            <p className="muted small">This agent sends the code's bytes without a listing; they are shown as bytes.</p>
            <pre className="hexdump" data-testid="code-hex">
              {view.hexLines.join("\n")}
            </pre>
          </>
        )}
      </section>
      {view.notes.length > 0 && (
        <ul className="muted small">
          {view.notes.map((n) => (
            <li key={n}>{n}</li>
          ))}
        </ul>
      )}
    </>
  );
}

/** A function's blocks in their new order: hot blocks coloured by chain, cold ones grey, widths by size. */
function LayoutStrip({ m }: { m: MemberView }) {
  const total = m.blocks.reduce((s, b) => s + b.size, 0) || 1;
  let x = 0;
  return (
    <figure className="layout-strip">
      <figcaption className="small">
        {m.fn}{" "}
        <span className="muted">
          {m.address} → {m.newAddress ?? "?"}
        </span>
      </figcaption>
      <svg width={600} height={14} role="img" aria-label={`${m.fn}: blocks in layout order`}>
        {m.blocks.map((b) => {
          const w = (b.size / total) * 600;
          const r = (
            <rect
              key={b.offset}
              x={x}
              y={0}
              width={Math.max(1, w - 0.5)}
              height={14}
              className={b.hot ? `blk hot c${b.chain % 8}` : "blk cold"}
            >
              <title>{`+0x${b.offset.toString(16)} (${b.size} bytes) ${b.hot ? `chain ${b.chain}` : "cold"}, count ${b.count}`}</title>
            </rect>
          );
          x += w;
          return r;
        })}
      </svg>
    </figure>
  );
}

function AuditTrail({ hostId, plan }: { hostId: string; plan: PlanDetail }) {
  const audit = usePlanAudit(hostId, plan.id, `${plan.state}|${plan.updated_at}`);
  return (
    <section aria-labelledby="audit-title">
      <h2 id="audit-title">Audit trail</h2>
      <table className="data" data-testid="plan-audit">
        <thead>
          <tr>
            <th>When</th>
            <th>Who</th>
            <th>What</th>
          </tr>
        </thead>
        <tbody>
          {(audit.data ?? []).map((a) => (
            <tr key={a.id}>
              <td>{new Date(a.at).toLocaleString()}</td>
              <td>{a.actor}</td>
              <td>{a.action.replace(/^plan_/, "").replace(/_/g, " ")}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
