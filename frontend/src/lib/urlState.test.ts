// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import {
  MAX_PICKED,
  measureLink,
  readFunctionView,
  readHostView,
  readIdList,
  writeFunctionView,
  writeHostView,
  withParams,
} from "./urlState";

describe("view state in the URL", () => {
  it("round-trips every part of a host view and leaves defaults out", () => {
    const p = new URLSearchParams(
      "tab=compare&from=2026-11-23T14:00:00.000Z&to=2026-11-23T14:05:00.000Z&q=vfs_*&sort=size&dir=asc&hot=1" +
        "&tsort=name&tdir=asc&page=3&idle=1&b_from=2026-11-23T13:55:00.000Z&b_to=2026-11-23T14:00:00.000Z&b_host=h2&paused=1",
    );
    const v = readHostView(p);
    expect(v).toMatchObject({
      tab: "compare",
      q: "vfs_*",
      treeSort: "size",
      treeDesc: false,
      hotOnly: true,
      topSort: "name",
      topDesc: false,
      page: 3,
      idle: true,
      bHost: "h2",
      paused: true,
    });
    expect(v.range).toEqual({
      kind: "absolute",
      from: new Date("2026-11-23T14:00:00Z"),
      to: new Date("2026-11-23T14:05:00Z"),
    });
    expect(readHostView(writeHostView(v))).toEqual(v);
    const defaults = writeHostView(readHostView(new URLSearchParams()));
    expect(defaults.toString()).toBe("from=now-1m&to=now");
  });

  it("keeps the differential flame graph's search and zoom apart from the flame tab's", () => {
    const v = readHostView(new URLSearchParams("tab=compare&fq=vfs&fzoom=all;do_syscall_64"));
    expect(v).toMatchObject({ flameQuery: "vfs", flameZoom: "all;do_syscall_64", diffQuery: "", diffZoom: "" });
    const w = readHostView(writeHostView({ ...v, diffQuery: "tcp", diffZoom: "all;tcp_sendmsg" }));
    expect(w).toMatchObject({
      flameQuery: "vfs",
      flameZoom: "all;do_syscall_64",
      diffQuery: "tcp",
      diffZoom: "all;tcp_sendmsg",
    });
  });

  it("ignores values it does not know and keeps other parameters", () => {
    const v = readHostView(new URLSearchParams("tab=bogus&sort=colour&page=-2&tsort=x"));
    expect(v).toMatchObject({ tab: "code", treeSort: "hotness", page: 1, topSort: "samples" });
    const out = writeHostView({ ...v, q: "x" }, new URLSearchParams("other=1"));
    expect(out.get("other")).toBe("1");
    expect(out.get("q")).toBe("x");
    expect(writeHostView({ ...v, q: "" }, out).has("q")).toBe(false);
  });

  it("keeps a function view's range, selected block and colour scale", () => {
    const v = readFunctionView(new URLSearchParams("from=now-5m&to=now&block=0x1a&scale=log"));
    expect(v).toEqual({ range: { kind: "relative", seconds: 300 }, block: 26, scale: "log" });
    expect(writeFunctionView(v).toString()).toBe("from=now-5m&to=now&block=0x1a&scale=log");
    expect(readFunctionView(new URLSearchParams("block=zz")).block).toBeNull();
    expect(writeFunctionView({ ...v, block: null, scale: "linear" }).toString()).toBe("from=now-5m&to=now");
  });

  it("keeps the functions ticked in the code tree, in order, as a short list of ids", () => {
    const v = readHostView(new URLSearchParams("pick=7,9,7,x,-1,10"));
    expect(v.picked).toEqual([7, 9, 10]);
    expect(writeHostView(v).get("pick")).toBe("7,9,10");
    expect(writeHostView({ ...v, picked: [] }, new URLSearchParams("pick=7")).has("pick")).toBe(false);
    expect(readHostView(new URLSearchParams()).picked).toEqual([]);
    expect(readIdList("99999999999999999")).toEqual([]);
    const many = Array.from({ length: MAX_PICKED + 50 }, (_, i) => i + 1).join(",");
    expect(readIdList(many)).toHaveLength(MAX_PICKED);
  });

  it("links the measure page of a target with functions picked", () => {
    expect(measureLink("host 1", "kernel", [7, 9])).toBe("/hosts/host%201/measure?target=kernel&fn=7%2C9");
    expect(measureLink("h", "kernel", [])).toBe("/hosts/h/measure?target=kernel");
    const fn = new URL(measureLink("h", "kernel", [7, 9]), "http://x").searchParams.get("fn");
    expect(readIdList(fn)).toEqual([7, 9]);
  });
});

describe("withParams", () => {
  it("sets and removes keys, keeps the others, and leaves its argument unchanged", () => {
    const search = new URLSearchParams("a=1&b=2&c=3");
    const next = withParams(search, { a: "9", b: null, d: "4" });
    expect(next.toString()).toBe("a=9&c=3&d=4");
    expect(search.toString()).toBe("a=1&b=2&c=3");
  });
});
