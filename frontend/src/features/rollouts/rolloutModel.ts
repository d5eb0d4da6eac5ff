// SPDX-License-Identifier: Apache-2.0
// Pure shaping for the roll-out views: the wave sizes as the operator types them (checked as the backend
// checks them) and in words, which operator action a roll-out's state allows and why not, each host's state and guard figures in words, and a roll-out's progress.
import type { Role, RolloutDetail, RolloutGuard, RolloutHost, RolloutHostState, RolloutState } from "../../api/types";
import type { RolloutAction } from "../../api/rolloutQueries";
import { formatChangeInterval } from "../../lib/format";

export const MAX_WAVES = 64;
export const MAX_WAVE_HOSTS = 10_000;

/** "1, 2, 4" → [1, 2, 4]; "" → null (the default: doubling from a canary of one); or the first mistake. */
export function parseWaveSizes(text: string): { sizes: number[] | null; error: string | null } {
  const parts = text
    .split(/[\s,]+/)
    .map((p) => p.trim())
    .filter((p) => p !== "");
  if (!parts.length) return { sizes: null, error: null };
  if (parts.length > MAX_WAVES) return { sizes: null, error: `at most ${MAX_WAVES} wave sizes` };
  const sizes: number[] = [];
  for (const p of parts) {
    if (!/^\d+$/.test(p)) return { sizes: null, error: `"${p}" is not a number of hosts` };
    const n = Number(p);
    if (n < 1 || n > MAX_WAVE_HOSTS) return { sizes: null, error: `a wave has 1 to ${MAX_WAVE_HOSTS} hosts, not ${p}` };
    sizes.push(n);
  }
  if (sizes[0] !== 1) return { sizes: null, error: "the first wave is the canary: one host" };
  return { sizes, error: null };
}

/** "1, 2, 4, … (the last size repeats)" or the default in words. */
export function wavesText(asked: number[] | null): string {
  if (!asked?.length) return "a canary of one host, then waves that double (2, 4, 8 …)";
  if (asked.length === 1) return "one host at a time";
  return `a canary of one host, then ${asked.slice(1).join(", ")} (the last size repeats)`;
}

export interface Rule {
  ok: boolean;
  why: string;
}

const FROM: Record<RolloutAction, readonly RolloutState[]> = {
  pause: ["running"],
  resume: ["paused"],
  revert: ["running", "paused", "halted", "completed"],
};

/** Whether the role may start and steer roll-outs: the operator role or above (approver, admin), as the
 *  backend's require_role("operator"); viewers read. */
export function canOperate(role: Role | undefined): boolean {
  return role === "operator" || role === "approver" || role === "admin";
}

/** Which of pause, resume and revert the state allows this user (operators and above act; viewers read). */
export function actionRules(state: RolloutState, role: Role): Record<RolloutAction, Rule> {
  const rule = (a: RolloutAction): Rule => {
    if (!canOperate(role)) return { ok: false, why: "viewers can watch a roll-out; operators act on it" };
    if (!FROM[a].includes(state))
      return { ok: false, why: `the roll-out is ${state}; this needs it ${FROM[a].join(" or ")}` };
    return { ok: true, why: "" };
  };
  return { pause: rule("pause"), resume: rule("resume"), revert: rule("revert") };
}

export const ROLLOUT_STATE_TEXT: Record<RolloutState, string> = {
  running: "running",
  paused: "paused: no further host starts",
  halted: "halted",
  completed: "completed",
  reverting: "reverting everywhere",
  reverted: "reverted everywhere",
};

export const HOST_STATE_TEXT: Record<RolloutHostState, string> = {
  pending: "waiting for its wave",
  installing: "installing",
  comparing: "comparing with the original",
  installed: "installed",
  reverted: "reverted",
  skipped: "skipped",
  failed: "failed",
};

/** The guard's figures in one line: its verdict, the change with its interval, the shares; or while it
 *  runs, that it runs. */
export function guardText(g: RolloutGuard | null | undefined): string {
  if (!g) return "—";
  if (g.state === "running") return "comparing…";
  if (g.state === "failed") return "the comparison failed";
  const change =
    g.change !== null && g.interval && g.confidence !== null && g.confidence !== undefined
      ? formatChangeInterval(g.change, g.interval, g.confidence)
      : null;
  const shares =
    g.share_original !== null && g.share_installed !== null
      ? `${(g.share_original * 100).toFixed(1)}% → ${(g.share_installed * 100).toFixed(1)}% of samples`
      : null;
  const verdict = g.verdict ? g.verdict.replace("_", " ") : g.state;
  const acted = g.action === "reverted" ? "; reverted by the guard" : "";
  return [verdict + acted, change, shares].filter(Boolean).join(" · ");
}

export interface Progress {
  /** Hosts whose answer is in (installed, reverted, skipped, failed). */
  done: number;
  total: number;
  byState: Partial<Record<RolloutHostState, number>>;
}

const FINAL: readonly RolloutHostState[] = ["installed", "reverted", "skipped", "failed"];

export function progress(r: Pick<RolloutDetail, "hosts">): Progress {
  const byState: Progress["byState"] = {};
  for (const h of r.hosts) byState[h.state] = (byState[h.state] ?? 0) + 1;
  return { done: r.hosts.filter((h) => FINAL.includes(h.state)).length, total: r.hosts.length, byState };
}

/** "3 installed, 1 reverted, 2 waiting" in the order a roll-out moves. */
export function statesText(byState: Partial<Record<RolloutHostState, number>>): string {
  const order: RolloutHostState[] = [
    "installed",
    "reverted",
    "failed",
    "skipped",
    "comparing",
    "installing",
    "pending",
  ];
  return order
    .filter((s) => byState[s])
    .map((s) => `${byState[s]} ${s === "pending" ? "waiting" : s}`)
    .join(", ");
}

/** The hosts of one wave, in their order. */
export function hostsOfWave(hosts: RolloutHost[], wave: number): RolloutHost[] {
  return hosts.filter((h) => h.wave === wave);
}
