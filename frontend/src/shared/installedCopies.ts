// SPDX-License-Identifier: Apache-2.0
/** Which functions run an installed copy: the members of the host's installed plans, by the module's
 *  catalog digest (a plan's group lies in its root's module) and the function's name. */
import type { FunctionSummary, Plan } from "../api/types";

export type InstalledCopies = ReadonlyMap<string, Plan>;

const key = (digest: string, name: string) => `${digest}\u0000${name}`;

export function installedCopies(plans: readonly Plan[] | undefined): InstalledCopies {
  const out = new Map<string, Plan>();
  for (const p of plans ?? []) {
    if (p.state !== "installed") continue;
    for (const name of p.members) if (!out.has(key(p.root_digest, name))) out.set(key(p.root_digest, name), p);
  }
  return out;
}

/** The installed plan whose group holds this function, if any. */
export function installedCopyOf(
  copies: InstalledCopies,
  fn: Pick<FunctionSummary, "digest" | "name">,
): Plan | undefined {
  return copies.get(key(fn.digest, fn.name));
}
