// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import type { RolloutHost } from "../../api/types";
import { actionRules, guardText, parseWaveSizes, progress, statesText, wavesText } from "./rolloutModel";

function host(id: string, wave: number, state: RolloutHost["state"]): RolloutHost {
  return {
    host_id: id,
    hostname: id,
    online: true,
    wave,
    target_id: "p1-1",
    plan_id: null,
    plan_state: null,
    state,
    reason: null,
    offline_since: null,
    updated_at: "2026-11-28T10:00:00Z",
    guard: null,
  };
}

describe("wave sizes", () => {
  it("reads sizes as typed, the default as null, and refuses what the backend refuses", () => {
    expect(parseWaveSizes(" 1, 2  4 ")).toEqual({ sizes: [1, 2, 4], error: null });
    expect(parseWaveSizes("")).toEqual({ sizes: null, error: null });
    expect(parseWaveSizes("2, 4").error).toBe("the first wave is the canary: one host");
    expect(parseWaveSizes("1, x").error).toBe('"x" is not a number of hosts');
    expect(parseWaveSizes("1, -2").error).toBe('"-2" is not a number of hosts');
    expect(parseWaveSizes("1, 0").error).toBe("a wave has 1 to 10000 hosts, not 0");
    expect(parseWaveSizes("1, 10001").error).toBe("a wave has 1 to 10000 hosts, not 10001");
    expect(parseWaveSizes(Array(65).fill("1").join(",")).error).toBe("at most 64 wave sizes");
  });

  it("says the waves in words: doubling by default, the last size repeating", () => {
    expect(wavesText(null)).toMatch(/canary of one host, then waves that double/);
    expect(wavesText([1, 5])).toBe("a canary of one host, then 5 (the last size repeats)");
    expect(wavesText([1])).toBe("one host at a time");
  });
});

describe("actions", () => {
  it("allows pause while running, resume while paused, revert until reverting; viewers none", () => {
    const running = actionRules("running", "operator");
    expect([running.pause.ok, running.resume.ok, running.revert.ok]).toEqual([true, false, true]);
    expect(running.resume.why).toBe("the roll-out is running; this needs it paused");
    const paused = actionRules("paused", "admin");
    expect([paused.pause.ok, paused.resume.ok, paused.revert.ok]).toEqual([false, true, true]);
    const halted = actionRules("halted", "operator");
    expect([halted.pause.ok, halted.resume.ok, halted.revert.ok]).toEqual([false, false, true]);
    const reverted = actionRules("reverted", "operator");
    expect(reverted.revert.ok).toBe(false);
    expect(actionRules("running", "approver").pause.ok).toBe(true);
    const viewer = actionRules("running", "viewer");
    expect(viewer.pause).toEqual({ ok: false, why: "viewers can watch a roll-out; operators act on it" });
  });
});

describe("guard and progress", () => {
  it("says the guard's verdict, its change with the interval and the shares", () => {
    expect(guardText(null)).toBe("—");
    expect(guardText({ state: "running" } as never)).toBe("comparing…");
    const slower = guardText({
      state: "done",
      action: "reverted",
      verdict: "slower",
      share_original: 0.2,
      share_installed: 0.22,
      change: 0.1,
      interval: [0.08, 0.12],
      confidence: 0.95,
    });
    expect(slower).toBe(
      "slower; reverted by the guard · +10.0% (95% interval +8.0% .. +12.0%) · 20.0% → 22.0% of samples",
    );
    expect(
      guardText({
        state: "done",
        action: "kept",
        verdict: "within_noise",
        share_original: null,
        share_installed: null,
        change: null,
        interval: null,
        confidence: null,
      }),
    ).toBe("within noise");
  });

  it("counts hosts that answered and says the states in the order a roll-out moves", () => {
    const p = progress({
      hosts: [host("a", 0, "installed"), host("b", 1, "reverted"), host("c", 1, "comparing"), host("d", 2, "pending")],
    });
    expect(p.done).toBe(2);
    expect(p.total).toBe(4);
    expect(statesText(p.byState)).toBe("1 installed, 1 reverted, 1 comparing, 1 waiting");
  });
});
