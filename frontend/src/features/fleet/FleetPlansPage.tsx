// SPDX-License-Identifier: Apache-2.0
// The plans installed across the fleet: which host runs which plan (its root and target), since when,
// installed and approved by whom, by which roll-out, and the root's measured calls per second and wall
// time per call before and after the install, as the plan's record has them (no comparison: the reason
// the server gives). Each plan links to its host's plan page. The label filter, the group, "also recently
// reverted" and the page live in the URL.
import { useState, type FormEvent } from "react";
import { Link, useSearchParams } from "react-router-dom";
import { FLEET_PLANS_PAGE, useFleetPlans } from "../../api/fleetQueries";
import type { FleetPlan } from "../../api/types";
import { withParams } from "../../lib/urlState";
import { beforeAfterText, parseLabelFilter } from "./fleetModel";

const REVERTED_H = 24;

export function FleetPlansPage() {
  const [search, setSearch] = useSearchParams();
  const filterText = search.get("label") ?? "";
  const { labels } = parseLabelFilter(filterText);
  const groupId = /^[0-9a-f]{32}$/.test(search.get("group") ?? "") ? search.get("group") : null;
  const withReverted = search.get("reverted") === "1";
  const offset = Math.max(0, Math.floor(Number(search.get("offset") ?? "0")) || 0);
  const plans = useFleetPlans({ labels, groupId, revertedWithinH: withReverted ? REVERTED_H : 0, offset });
  const [draft, setDraft] = useState(filterText);
  const [draftError, setDraftError] = useState<string | null>(null);
  const update = (change: Record<string, string | null>) => setSearch(withParams(search, change));
  const apply = (e: FormEvent) => {
    e.preventDefault();
    const parsed = parseLabelFilter(draft);
    setDraftError(parsed.error);
    if (parsed.error) return;
    update({ label: parsed.labels.length ? parsed.labels.join(" ") : null, offset: null });
  };
  const data = plans.data;
  return (
    <section className="fleet-plans">
      <p>
        <Link to="/">← Fleet</Link>
      </p>
      <div className="page-head">
        <h1>Installed plans</h1>
        {groupId && (
          <span className="muted">
            one kernel build ·{" "}
            <button type="button" className="link-button" onClick={() => update({ group: null, offset: null })}>
              all builds
            </button>
          </span>
        )}
      </div>
      <form className="fleet-filter" onSubmit={apply} role="search" aria-label="Filter plans by host label">
        <label>
          Label filter{" "}
          <input
            type="search"
            value={draft}
            placeholder="role=db rack=r1"
            onChange={(e) => setDraft(e.target.value)}
            aria-invalid={draftError !== null}
          />
        </label>{" "}
        <button type="submit">Filter</button>{" "}
        <label>
          <input
            type="checkbox"
            checked={withReverted}
            onChange={(e) => update({ reverted: e.target.checked ? "1" : null, offset: null })}
          />{" "}
          Also reverted in the last {REVERTED_H} h
        </label>
        {draftError && (
          <span className="error" role="alert">
            {" "}
            {draftError}
          </span>
        )}
      </form>
      {plans.isPending && <p className="muted">Loading installed plans…</p>}
      {plans.isError && (
        <p className="error" role="alert">
          Could not load the installed plans: {plans.error.message}
        </p>
      )}
      {data && (
        <>
          <p className="muted">
            {data.total} plan{data.total === 1 ? "" : "s"} installed
            {withReverted ? ` or reverted in the last ${REVERTED_H} h` : ""}
            {labels.length > 0 && <> on hosts with {labels.join(", ")}</>}
            {data.total > data.items.length && (
              <>
                {" "}
                · {data.offset + 1}–{data.offset + data.items.length} shown
              </>
            )}
          </p>
          {data.items.length === 0 ? (
            <p className="muted">No plan is installed on these hosts.</p>
          ) : (
            <table className="grid" aria-label="Installed plans">
              <thead>
                <tr>
                  <th scope="col">Host</th>
                  <th scope="col">Plan</th>
                  <th scope="col">Target</th>
                  <th scope="col">Since</th>
                  <th scope="col">Installed by / approved by</th>
                  <th scope="col">Roll-out</th>
                  <th scope="col">Calls/s before → after</th>
                  <th scope="col">Wall per call before → after</th>
                </tr>
              </thead>
              <tbody>
                {data.items.map((p) => (
                  <PlanRow key={p.plan_id} plan={p} />
                ))}
              </tbody>
            </table>
          )}
          <p>
            <button
              type="button"
              disabled={data.offset === 0}
              onClick={() => update({ offset: String(Math.max(0, data.offset - FLEET_PLANS_PAGE)) || null })}
            >
              Previous
            </button>{" "}
            <button
              type="button"
              disabled={data.offset + data.items.length >= data.total}
              onClick={() => update({ offset: String(data.offset + FLEET_PLANS_PAGE) })}
            >
              Next
            </button>
          </p>
        </>
      )}
    </section>
  );
}

function PlanRow({ plan: p }: { plan: FleetPlan }) {
  const host = encodeURIComponent(p.host_id);
  const notes = [
    p.comparison?.emulated ? "under emulation: not a performance figure" : null,
    p.estimated ? "the plan's block counts were estimated (sampled)" : null,
  ].filter((n): n is string => n !== null);
  return (
    <tr>
      <td>
        <Link to={`/hosts/${host}`}>{p.hostname}</Link>
        {!p.online && <span className="muted small"> offline</span>}
      </td>
      <td>
        <Link to={`/hosts/${host}/plans/${p.plan_id}`} className="mono">
          {p.root_name}
        </Link>
        {p.state === "reverted" && <span className="warn small"> reverted</span>}
      </td>
      <td className="mono">
        {p.target_kind === "kernel" ? "kernel" : p.target_id}
        {p.target_module && <span className="muted small"> {p.target_module}</span>}
      </td>
      <td title={p.installed_at ?? undefined}>
        {p.installed_at ? new Date(p.installed_at).toLocaleString() : "—"}
        {p.reverted_at && <div className="muted small">reverted {new Date(p.reverted_at).toLocaleString()}</div>}
      </td>
      <td>
        {p.installed_by ?? "—"} / {p.approved_by ?? "—"}
      </td>
      <td>
        {p.rollout_id ? (
          <Link to={`/rollouts/${p.rollout_id}`}>{p.rollout_state ?? "roll-out"}</Link>
        ) : (
          <span className="muted">none</span>
        )}
      </td>
      <td className={p.comparison ? "num" : "muted small"}>{beforeAfterText(p, "calls_per_s")}</td>
      <td className={p.comparison ? "num" : "muted small"}>
        {p.comparison ? beforeAfterText(p, "wall_ns_per_call") : ""}
        {notes.map((n) => (
          <div key={n} className="estimate small">
            {n}
          </div>
        ))}
      </td>
    </tr>
  );
}
