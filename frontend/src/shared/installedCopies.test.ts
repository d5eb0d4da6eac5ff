// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import type { Plan } from "../api/types";
import { installedCopies, installedCopyOf } from "./installedCopies";

const plan = (over: Partial<Plan>): Plan =>
  ({
    id: "p1",
    state: "installed",
    root_digest: "a".repeat(64),
    root_name: "pr_root",
    members: ["pr_root", "pr_op"],
    ...over,
  }) as Plan;

describe("installed copies", () => {
  it("marks the members of installed plans by module digest and name, and nothing else", () => {
    const copies = installedCopies([
      plan({}),
      plan({ id: "p2", state: "reverted", members: ["pr_hash"] }),
      plan({ id: "p3", state: "approved", members: ["pr_mix"] }),
    ]);
    expect(installedCopyOf(copies, { digest: "a".repeat(64), name: "pr_op" })?.id).toBe("p1");
    expect(installedCopyOf(copies, { digest: "a".repeat(64), name: "pr_root" })?.id).toBe("p1");
    // Same name in another module, and members of plans not installed: not marked.
    expect(installedCopyOf(copies, { digest: "b".repeat(64), name: "pr_op" })).toBeUndefined();
    expect(installedCopyOf(copies, { digest: "a".repeat(64), name: "pr_hash" })).toBeUndefined();
    expect(installedCopyOf(copies, { digest: "a".repeat(64), name: "pr_mix" })).toBeUndefined();
    expect(installedCopies(undefined).size).toBe(0);
  });
});
