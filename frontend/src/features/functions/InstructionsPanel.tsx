// SPDX-License-Identifier: Apache-2.0
// The instructions of the selected basic block, decoded by the agent on request, with each one's samples
// over the range when they are known (like perf annotate) and the function's hottest instruction marked.
// Loading and failures (e.g. the host is offline, so nothing can read its kernel text) are shown in place.
// Instructions a running measurement probes are marked; their bytes are the program's own, not the int3.
import type { Block, Instruction } from "../../api/types";
import { formatAddress } from "../../lib/address";
import { instructionsOfBlock } from "../../shared/cfg/cfgModel";
import { ProbeBadge } from "../../shared/ProbeBadge";

/** Samples per instruction of the whole function (offsets from its start). */
export interface InstructionSampleCounts {
  counts: Map<number, number>;
  /** Offset of the function's hottest instruction, or null without samples. */
  hottest: number | null;
  /** Samples of the function's instructions in the range. */
  total: number;
}

export interface InstructionsPanelProps {
  block: Block | null;
  blockHex: string | null;
  instructions: readonly Instruction[] | undefined;
  loading: boolean;
  error: string | null;
  samples?: InstructionSampleCounts | null;
  /** Select the block holding the hottest instruction. */
  onGoHottest?: () => void;
}

/** Per-instruction counts from the API's items; the hottest is the one with most samples (lowest offset
 *  on a tie). */
export function instructionCounts(items: readonly { offset: number; samples: number }[]): InstructionSampleCounts {
  const counts = new Map<number, number>();
  let hottest: number | null = null;
  let total = 0;
  for (const it of items) {
    counts.set(it.offset, it.samples);
    total += it.samples;
    if (
      hottest === null ||
      it.samples > counts.get(hottest)! ||
      (it.samples === counts.get(hottest) && it.offset < hottest)
    )
      hottest = it.offset;
  }
  return { counts, hottest, total };
}

/** "4889e5" → "48 89 e5"; already spaced byte strings stay as they are. */
export function spacedBytes(bytes: string): string {
  const b = bytes.trim();
  if (/\s/.test(b) || !/^[0-9a-fA-F]+$/.test(b)) return b;
  return b.match(/.{1,2}/g)?.join(" ") ?? b;
}

export function InstructionsPanel({
  block,
  blockHex,
  instructions,
  loading,
  error,
  samples,
  onGoHottest,
}: InstructionsPanelProps) {
  const rows = block && instructions ? instructionsOfBlock(instructions, block) : [];
  const max = samples ? Math.max(1, ...samples.counts.values()) : 1;
  const hottestHere =
    samples?.hottest !== null && samples?.hottest !== undefined && rows.some((r) => r.offset === samples.hottest);
  return (
    <section aria-label="Instructions" role="region" className="instructions">
      <h2>Instructions</h2>
      {!block && <p className="muted">Select a block in the graph to see its instructions.</p>}
      {block && (
        <p className="block-head">
          Block <span className="addr">{formatAddress(blockHex, block.address)}</span> · size {block.size} ·{" "}
          {block.instruction_count} instructions
        </p>
      )}
      {samples && samples.hottest !== null && (
        <p className="small" data-testid="hottest-instruction">
          Hottest instruction: +0x{samples.hottest.toString(16)} ({samples.counts.get(samples.hottest)} of{" "}
          {samples.total} samples)
          {!hottestHere && onGoHottest && (
            <>
              {" "}
              ·{" "}
              <button type="button" className="link-button" onClick={onGoHottest}>
                show it
              </button>
            </>
          )}
        </p>
      )}
      {samples && samples.total === 0 && block && (
        <p className="muted small">No per-instruction samples in this range.</p>
      )}
      {block && loading && <p className="muted">Loading instructions…</p>}
      {block && error && (
        <p className="error" role="alert">
          Instructions unavailable: {error}
        </p>
      )}
      {block && !loading && !error && instructions && rows.length === 0 && (
        <p className="muted">The agent returned no instructions for this block.</p>
      )}
      {rows.some((r) => r.probe) && (
        <p className="muted small" data-testid="probe-note">
          A running measurement's probe sits on {rows.filter((r) => r.probe).length} instruction(s) here, marked probe;
          the bytes shown are the program's own.
        </p>
      )}
      {rows.length > 0 && (
        <table className="grid insns">
          <thead>
            <tr>
              {samples && (
                <th scope="col" className="num">
                  Samples
                </th>
              )}
              <th scope="col">Address</th>
              <th scope="col">Bytes</th>
              <th scope="col">Instruction</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((ins) => {
              const n = samples?.counts.get(ins.offset) ?? 0;
              const hot = samples?.hottest === ins.offset;
              return (
                <tr
                  key={ins.offset}
                  className={[hot ? "hottest" : "", ins.probe ? "probed" : ""].join(" ").trim() || undefined}
                  aria-current={hot ? "true" : undefined}
                >
                  {samples && (
                    <td className="num insn-samples">
                      {hot && <span className="badge hot">hottest</span>}
                      {n > 0 && (
                        <span
                          className="insn-bar"
                          style={{ width: `${Math.max(2, (n / max) * 40)}px` }}
                          aria-hidden="true"
                        />
                      )}
                      {n > 0 ? n : ""}{" "}
                    </td>
                  )}
                  <td className="addr">{formatAddress(ins.address_hex, ins.address)} </td>
                  <td className="bytes">{spacedBytes(ins.bytes)} </td>
                  <td className="asm">
                    {ins.text}
                    {ins.probe && (
                      <>
                        {" "}
                        <ProbeBadge />
                      </>
                    )}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </section>
  );
}
