// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import type { FleetHotCode } from "../../api/types";
import {
  cellLink,
  heatLevel,
  heatTable,
  hostShareText,
  labelTexts,
  parseLabelFilter,
  parseLabelLines,
} from "./fleetModel";

function hotCode(): FleetHotCode {
  const cell = (host_id: string, samples: number, share: number) => ({ host_id, samples, share, hot: share >= 0.2 });
  return {
    from: "2026-11-27T01:00:00Z",
    to: "2026-11-27T02:00:00Z",
    seconds: 3600,
    covered_from: "2026-11-27T01:00:00Z",
    covered_to: "2026-11-27T02:00:00Z",
    rollups: [{ grain: "1h", from: "2026-11-27T01:00:00Z", to: "2026-11-27T02:00:00Z" }],
    group: { id: "a".repeat(32), kernel_release: "6.18.0", kernel_build_id: "b1" },
    labels: {},
    min_share: 0.2,
    hosts: [
      { id: "h-a", hostname: "alpha", online: true, labels: {}, busy_samples: 100 },
      { id: "h-b", hostname: "beta", online: true, labels: {}, busy_samples: 900 },
      { id: "h-c", hostname: "gamma", online: false, labels: {}, busy_samples: 0 },
    ],
    functions: 2,
    limit: 100,
    offset: 0,
    items: [
      {
        function_id: 7,
        name: "tcp_rcv",
        module: "vmlinux",
        samples: 500,
        hot_hosts: 2,
        host_share: 2 / 3,
        cells: [cell("h-b", 450, 0.5), cell("h-a", 50, 0.5)],
      },
      {
        function_id: 9,
        name: "memcpy",
        module: "vmlinux",
        samples: 9,
        hot_hosts: 0,
        host_share: 0,
        cells: [cell("h-b", 9, 0.01)],
      },
    ],
  };
}

describe("fleet model", () => {
  it("parses a label filter typed with spaces or commas and names the first mistake", () => {
    expect(parseLabelFilter(" role=db,  rack=r1 ")).toEqual({ labels: ["role=db", "rack=r1"], error: null });
    expect(parseLabelFilter("")).toEqual({ labels: [], error: null });
    expect(parseLabelFilter("role")).toEqual({ labels: [], error: '"role" is not key=value' });
    expect(parseLabelFilter("=db").error).toBe('"=db" is not key=value');
    expect(parseLabelFilter("ro!e=db").error).toBe('"ro!e" is not a label key');
  });

  it("parses edited label lines by the backend's rules", () => {
    expect(parseLabelLines("role=db\n\nrack = r1\nempty=")).toEqual({
      labels: { role: "db", rack: "r1", empty: "" },
      error: null,
    });
    expect(parseLabelLines("role=db\nrole=web").error).toBe("role is given twice");
    expect(parseLabelLines("role").error).toBe('"role" is not key=value');
    expect(parseLabelLines("bad key=x").error).toMatch(/not a label key/);
    expect(parseLabelLines(`role=${"x".repeat(256)}`).error).toBe("role: at most 255 characters");
    expect(parseLabelLines("role=a\u0007b").error).toBe("role: control characters are not allowed");
    expect(parseLabelLines(Array.from({ length: 33 }, (_, i) => `k${i}=v`).join("\n")).error).toBe("at most 32 labels");
  });

  it("prints labels sorted by key", () => {
    expect(labelTexts({ role: "db", rack: "r1" })).toEqual(["rack=r1", "role=db"]);
    expect(labelTexts(undefined)).toEqual([]);
  });

  it("lays the heat table out busiest host first, with an empty cell where a host has no samples", () => {
    const t = heatTable(hotCode());
    expect(t.hosts.map((h) => h.hostname)).toEqual(["beta", "alpha", "gamma"]);
    expect(t.rows.map((r) => r.fn.name)).toEqual(["tcp_rcv", "memcpy"]);
    expect(t.rows[0].cells.map((c) => c?.samples ?? null)).toEqual([450, 50, null]);
    expect(t.rows[1].cells.map((c) => c?.samples ?? null)).toEqual([9, null, null]);
  });

  it("steps the heat by share, zero for no samples", () => {
    expect(heatLevel(null)).toBe(0);
    expect(heatLevel({ host_id: "h", samples: 0, share: 0, hot: false })).toBe(0);
    expect(heatLevel({ host_id: "h", samples: 1, share: 0.001, hot: false })).toBe(1);
    expect(heatLevel({ host_id: "h", samples: 1, share: 0.2, hot: true })).toBe(3);
    expect(heatLevel({ host_id: "h", samples: 1, share: 0.5, hot: true })).toBe(5);
  });

  it("links a cell to the host's function view over the table's exact range", () => {
    expect(cellLink("h/1", 7, hotCode())).toBe(
      "/hosts/h%2F1/functions/7?from=2026-11-27T01%3A00%3A00.000Z&to=2026-11-27T02%3A00%3A00.000Z",
    );
    expect(hostShareText({ hot_hosts: 2, host_share: 2 / 3 }, 3)).toBe("2 of 3 hosts (67%)");
    expect(hostShareText({ hot_hosts: 1, host_share: 1 }, 1)).toBe("1 of 1 host (100%)");
  });
});
