// SPDX-License-Identifier: Apache-2.0
// Test data shaped like the API's responses, with real-looking kernel addresses above 2^53, and
// a fetch stand-in that answers by URL path (the only fake in the unit tests: no backend runs
// inside jsdom).
import type { Block, FunctionDetail, FunctionSummary, Host } from "../api/types";

export function fnSummary(over: Partial<FunctionSummary> & { id: number; name: string }): FunctionSummary {
  return {
    module: "vmlinux",
    digest: "0".repeat(64),
    index: over.id,
    address: 18446744071579000000,
    address_hex: "ffffffff81000000",
    size: 64,
    block_count: 3,
    samples_per_sec: 0,
    undecodable: false,
    ...over,
  };
}

export function block(offset: number, size: number, successors: Block["successors"], hex?: string): Block {
  const addressHex = hex ?? (BigInt("0xffffffff81234560") + BigInt(offset)).toString(16);
  return {
    offset,
    address: Number(BigInt(`0x${addressHex}`)),
    address_hex: addressHex,
    size,
    instruction_count: 2,
    successors,
  };
}

/** A successor; `kind` is a plain string so tests can also send kinds the console does not know. */
export function succ(
  kind: string,
  target_offset: number | null,
  extra: Partial<Block["successors"][number]> = {},
): Block["successors"][number] {
  return {
    kind: kind as Block["successors"][number]["kind"],
    target_offset,
    target_address: null,
    target_address_hex: null,
    target_name: null,
    target_function_id: null,
    ...extra,
  };
}

/** A small function: entry → (taken | fallthrough) → join → return, plus a tail call and an indirect jump. */
export function sampleDetail(): FunctionDetail {
  return {
    function: fnSummary({
      id: 7,
      name: "vfs_read",
      address: 18446744071580000000,
      address_hex: "ffffffff81234560",
      size: 0x40,
      block_count: 4,
    }),
    undecodable_offset: null,
    blocks: [
      block(0x10, 8, [succ("fallthrough", 0x18), succ("taken", 0x30)]),
      block(0, 16, [succ("fallthrough", 0x10)]),
      block(0x18, 24, [
        succ("tail_call", null, {
          target_name: "rw_verify_area",
          target_address_hex: "ffffffff81230000",
          target_function_id: 9,
        }),
        succ("indirect", null),
      ]),
      block(0x30, 16, [succ("return", null)]),
    ],
    callees: [
      {
        site_offset: 4,
        target_address: 0,
        target_address_hex: "ffffffff81200000",
        name: "__fsnotify_parent",
        module: "vmlinux",
        function_id: 11,
      },
      {
        site_offset: 12,
        target_address: 0,
        target_address_hex: "ffffffffc0001000",
        name: null,
        module: null,
        function_id: null,
      },
    ],
    indirect_call_sites: [0x20],
  };
}

export function host(over: Partial<Host> = {}): Host {
  return {
    id: "host-1",
    hostname: "box1",
    kernel_release: "6.18.0-test",
    kernel_build_id: "abc123",
    cpu_model: "Test CPU @ 2.0GHz",
    cpu_count: 2,
    l1i: { size_bytes: 32768, line_bytes: 64, ways: 8 },
    capabilities: [
      { name: "bpf_probe_read_kernel", available: true, detail: "" },
      {
        name: "hardware_pmu",
        available: false,
        detail: "perf_event_open(PERF_TYPE_HARDWARE) failed: ENOENT (no PMU in this VM)",
      },
    ],
    agent_version: "0.1.0",
    online: true,
    last_seen: new Date().toISOString(),
    connected_at: new Date().toISOString(),
    catalog_complete: true,
    function_count: 120000,
    block_count: 900000,
    sample_frequency_hz: 99,
    sample_event: "cpu-clock",
    status: "active",
    enrolled: true,
    cert_not_after: "2027-11-23T00:00:00Z",
    replica: "backend-1:50051",
    clock_offset_ms: 12,
    clock_skewed: false,
    refused_batches: 0,
    ...over,
  };
}

type Route = (req: Request) => Response | Promise<Response>;

export function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
}

/** A fetch that answers from a table of path → handler and records every request. */
export function routeFetch(routes: Record<string, Route>) {
  const requests: Request[] = [];
  const fetch = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const req = input instanceof Request ? input : new Request(String(input), init);
    requests.push(req);
    const path = new URL(req.url).pathname;
    const handler = routes[`${req.method} ${path}`] ?? routes[path];
    if (!handler) return json({ detail: `no route for ${req.method} ${path}` }, 404);
    return handler(req);
  };
  return { fetch, requests };
}
