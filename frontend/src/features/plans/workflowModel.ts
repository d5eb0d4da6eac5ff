// SPDX-License-Identifier: Apache-2.0
// The plan workflow's rules as the plan page applies them: which steps the signed-in user may take in
// the plan's state (and why not), which one is next (the page's primary button), and what a plan id
// looks like. Pure; the backend enforces the same rules.
import { isUuid } from "../../lib/ids";
import type { PlanStep } from "../../api/queries";

export const RANK: Record<string, number> = { viewer: 0, operator: 1, approver: 2, admin: 3 };

/** Plan ids are UUIDs: anything else is not asked for (the API would only answer a validation error). */
export function isPlanId(id: string): boolean {
  return isUuid(id);
}

export type StepRules = Record<PlanStep, { ok: boolean; why: string }>;

/** Whether `role` (the requester when `own`) may take each step of a plan in `state`. */
export function stepRules(state: string, role: string, own: boolean, made = false): StepRules {
  const rank = RANK[role] ?? 0;
  return {
    request: {
      ok: state === "ready" && rank >= 1,
      why: state !== "ready" ? "only a ready plan is requested" : "needs the operator role",
    },
    approve: {
      ok: state === "requested" && rank >= 2 && !own && !made,
      why:
        state !== "requested"
          ? "nothing is requested"
          : own
            ? "you requested it: another approver decides"
            : made
              ? "you made it: another approver decides"
              : "needs the approver role",
    },
    reject: { ok: state === "requested" && rank >= 2 && !own, why: "as approve" },
    install: {
      ok: state === "approved" && rank >= 1,
      why: state !== "approved" ? "only an approved plan is installed" : "needs the operator role",
    },
    revert: {
      ok: state === "installed" && rank >= 1,
      why: state !== "installed" ? "nothing is installed" : "needs the operator role",
    },
    // The roles that install compare (the backend also refuses while a comparison runs, and kernel plans).
    compare: {
      ok: state === "installed" && rank >= 1,
      why: state !== "installed" ? "only an installed plan is compared" : "needs the operator role",
    },
  };
}

/** The step the plan waits for, when the user may take it: the page's one primary button. Reject is
 *  never the primary step (approving is what a request asks for). */
export function nextStep(state: string, rules: StepRules): PlanStep | null {
  const next: Record<string, PlanStep> = {
    ready: "request",
    requested: "approve",
    approved: "install",
    installed: "revert",
  };
  const step = next[state];
  return step && rules[step].ok ? step : null;
}
