// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import { isPlanId, nextStep, stepRules } from "./workflowModel";

describe("the plan workflow", () => {
  it("makes the step the plan waits for the primary one, when the user may take it", () => {
    expect(nextStep("ready", stepRules("ready", "operator", false))).toBe("request");
    expect(nextStep("requested", stepRules("requested", "approver", false))).toBe("approve");
    expect(nextStep("approved", stepRules("approved", "operator", false))).toBe("install");
    expect(nextStep("installed", stepRules("installed", "operator", false))).toBe("revert");
  });

  it("offers no primary step to one who may not take it", () => {
    expect(nextStep("requested", stepRules("requested", "approver", true))).toBeNull();
    expect(nextStep("requested", stepRules("requested", "operator", false))).toBeNull();
    expect(nextStep("ready", stepRules("ready", "viewer", false))).toBeNull();
    expect(nextStep("planning", stepRules("planning", "admin", false))).toBeNull();
    expect(nextStep("reverted", stepRules("reverted", "admin", false))).toBeNull();
  });

  it("does not let the plan's maker approve it, whoever requested it", () => {
    const rules = stepRules("requested", "approver", false, true);
    expect(rules.approve.ok).toBe(false);
    expect(rules.approve.why).toMatch(/you made it/);
    expect(nextStep("requested", rules)).toBeNull();
  });

  it("lets the roles that install compare an installed plan again, and no one else", () => {
    expect(stepRules("installed", "operator", false).compare.ok).toBe(true);
    expect(stepRules("installed", "viewer", false).compare).toEqual({ ok: false, why: "needs the operator role" });
    expect(stepRules("reverted", "admin", false).compare.why).toMatch(/only an installed plan/);
  });

  it("knows a plan id from a made-up one", () => {
    expect(isPlanId("0b6f4c1e-8a3d-4f7a-9c2e-5d1b7e9a4f20")).toBe(true);
    expect(isPlanId("not-a-plan")).toBe(false);
    expect(isPlanId("12345")).toBe(false);
  });
});
