// SPDX-License-Identifier: Apache-2.0
// The agent's `hotpathd inspect ... --json` output as the console's FunctionDetail, so bench/cfg_layout
// lays out real kernel functions with exactly the console's model and layout code. Addresses are
// 64-bit integers in that JSON; they are read as text before parsing so no bit is lost.
import type { FunctionDetail } from "../../api/types";

interface AgentSuccessor {
  kind: string;
  target?: string | null;
  target_name?: string | null;
}
interface AgentBlock {
  start: string;
  size: number;
  instructions: unknown[];
  successors: AgentSuccessor[];
}
interface AgentFunction {
  function: { name: string; module: string; address: string; size: number };
  blocks: AgentBlock[];
  indirect_call_sites?: string[];
}

/** Parse inspect JSON, keeping the big integers of address fields exact as strings. */
export function parseAgentJson(text: string): AgentFunction {
  return JSON.parse(text.replace(/("(?:start|address|target|site)"\s*:\s*)(\d+)/g, '$1"$2"')) as AgentFunction;
}

export function agentFunctionToDetail(fn: AgentFunction, id = 1): FunctionDetail {
  const start = BigInt(fn.function.address);
  const size = BigInt(fn.function.size);
  const blocks = fn.blocks.map((b) => {
    const addr = BigInt(b.start);
    return {
      offset: Number(addr - start),
      address: Number(addr),
      address_hex: addr.toString(16),
      size: b.size,
      instruction_count: b.instructions.length,
      successors: b.successors.map((s) => {
        const target = s.target !== undefined && s.target !== null ? BigInt(s.target) : null;
        const inside = target !== null && target >= start && target < start + size;
        return {
          kind: s.kind as FunctionDetail["blocks"][number]["successors"][number]["kind"],
          target_offset: inside ? Number(target - start) : null,
          target_address: target !== null ? Number(target) : null,
          target_address_hex: target !== null ? target.toString(16) : null,
          target_name: s.target_name ?? null,
          target_function_id: null,
        };
      }),
    };
  });
  return {
    function: {
      id,
      name: fn.function.name,
      module: fn.function.module,
      digest: "",
      index: 0,
      address: Number(start),
      address_hex: start.toString(16),
      size: fn.function.size,
      block_count: blocks.length,
      samples_per_sec: 0,
      undecodable: false,
    },
    undecodable_offset: null,
    blocks,
    callees: [],
    indirect_call_sites: [],
  };
}
