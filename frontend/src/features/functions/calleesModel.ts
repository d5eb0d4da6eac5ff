// SPDX-License-Identifier: Apache-2.0
// A function's direct callees from its code, one row per called function (not per call site): how many
// sites call it and where, most-called first. A function that calls one helper from 200 sites reads as
// one row "×200", not 200 rows of the same name. Pure.
import type { FunctionDetail } from "../../api/types";

type Callee = FunctionDetail["callees"][number];

export interface CalleeGroup {
  /** The call target (hex, as the API sends it), the key of the group; for a target the backend stores
   *  by name only (outside the caller's module: no address), the module and name. */
  target: string;
  address: number | null;
  name: string | null;
  module: string | null;
  functionId: number | null;
  /** Offsets of the call sites in the caller, ascending. */
  sites: number[];
}

export function groupCallees(callees: readonly Callee[]): CalleeGroup[] {
  const byTarget = new Map<string, CalleeGroup>();
  for (const c of callees) {
    const key =
      c.target_address_hex ??
      (c.target_address !== null ? String(c.target_address) : `${c.module ?? ""}:${c.name ?? ""}`);
    let g = byTarget.get(key);
    if (!g) {
      g = {
        target: key,
        address: c.target_address,
        name: c.name,
        module: c.module,
        functionId: c.function_id ?? null,
        sites: [],
      };
      byTarget.set(key, g);
    }
    g.sites.push(c.site_offset);
  }
  const out = [...byTarget.values()];
  for (const g of out) g.sites.sort((a, b) => a - b);
  // Most-called first; then named before unresolved addresses, by name.
  out.sort(
    (a, b) =>
      b.sites.length - a.sites.length ||
      Number(a.name === null) - Number(b.name === null) ||
      (a.name ?? a.target).localeCompare(b.name ?? b.target),
  );
  return out;
}
