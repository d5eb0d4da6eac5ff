// SPDX-License-Identifier: Apache-2.0
// The instructions of the selected basic block, decoded by the agent on request. Loading and
// failures (e.g. the host is offline, so nothing can read its kernel text) are shown in place.
import type { Block, Instruction } from "../../api/types";
import { formatAddress } from "../../lib/address";
import { instructionsOfBlock } from "./cfgModel";

export interface InstructionsPanelProps {
  block: Block | null;
  blockHex: string | null;
  instructions: readonly Instruction[] | undefined;
  loading: boolean;
  error: string | null;
}

/** "4889e5" → "48 89 e5"; already spaced byte strings stay as they are. */
export function spacedBytes(bytes: string): string {
  const b = bytes.trim();
  if (/\s/.test(b) || !/^[0-9a-fA-F]+$/.test(b)) return b;
  return b.match(/.{1,2}/g)?.join(" ") ?? b;
}

export function InstructionsPanel({ block, blockHex, instructions, loading, error }: InstructionsPanelProps) {
  const rows = block && instructions ? instructionsOfBlock(instructions, block) : [];
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
      {block && loading && <p className="muted">Loading instructions…</p>}
      {block && error && <p className="error" role="alert">Instructions unavailable: {error}</p>}
      {block && !loading && !error && instructions && rows.length === 0 && (
        <p className="muted">The agent returned no instructions for this block.</p>
      )}
      {rows.length > 0 && (
        <table className="grid insns">
          <thead>
            <tr>
              <th scope="col">Address</th>
              <th scope="col">Bytes</th>
              <th scope="col">Instruction</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((ins) => (
              <tr key={ins.offset}>
                <td className="addr">{formatAddress(ins.address_hex, ins.address)}{" "}</td>
                <td className="bytes">{spacedBytes(ins.bytes)}{" "}</td>
                <td className="asm">{ins.text}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
