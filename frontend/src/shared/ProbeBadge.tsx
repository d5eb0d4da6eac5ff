// SPDX-License-Identifier: Apache-2.0
// The "probe" mark of an instruction listing (the function page's instruction panel and the plan
// page's original disassembly).

/** Where a running measurement's probe (an int3 the kernel put in the code) sits: the instruction
 *  listed is the program's own. */
export function ProbeBadge() {
  return (
    <span
      className="badge probe"
      title="A running measurement's probe sits here; the instruction shown is the program's own"
    >
      probe
    </span>
  );
}
