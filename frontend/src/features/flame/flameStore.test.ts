// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import "fake-indexeddb/auto";
import { IDBFactory } from "fake-indexeddb";
import { describe, expect, it } from "vitest";
import type { FlameDefinitionsData, FlameStacksData } from "../../api/types";
import { KeptDefinitions } from "./flameLoad";
import { StackCache } from "./flameStacks";
import { evictions, IdbStore } from "./flameStore";

const encode = (v: unknown) => new TextEncoder().encode(JSON.stringify(v)).buffer;
const text = (b: ArrayBuffer) => new TextDecoder().decode(b);

const reply = (catalog: string): FlameStacksData => ({
  from: "2026-01-01T00:00:00Z",
  to: "2026-01-01T01:00:00Z",
  seconds: 3600,
  filter: { pid: null, comm: null, cpu: null, idle: "exclude" },
  samples: 100,
  undefined_samples: 0,
  stacks: { id: ["00000000000000a1", "00000000000000b2"], samples: [40, 60] },
  contexts: { processes: [], commands: [], cpus: [], all_samples: 100, idle_samples: 0 },
  catalog,
});

// The same two stacks as two databases name them: the second numbers vfs_read otherwise.
const defs = (readId: number): FlameDefinitionsData => ({
  frames: [
    { name: "entry_SYSCALL_64", module: "vmlinux", kind: "kernel", function_id: 1 },
    { name: "vfs_read", module: "vmlinux", kind: "kernel", function_id: readId },
  ],
  stacks: { id: ["00000000000000a1", "00000000000000b2"], length: [2, 1], frame: [0, 1, 0] },
});

/** A page of the console: its worker's kept definitions over the browser's storage (`factory`). */
async function view(factory: IDBFactory, catalog: string, readId: number) {
  const kept = new KeptDefinitions(new StackCache(), new IdbStore(factory));
  kept.open("h1"); // as the flame tab opens, before the reply
  const load = await kept.read("h1", encode(reply(catalog)));
  const missing = load.missing();
  const body = missing.length ? encode(defs(readId)) : null;
  const loaded = load.finish(body, missing.length);
  if (body) await kept.save(load, body);
  return { missing, loaded };
}

describe("IdbStore", () => {
  it("keeps a host's definitions replies in order and starts again under another catalog key", async () => {
    const store = new IdbStore(new IDBFactory());
    expect(await store.load("h1")).toBeNull();
    await store.save("h1", "k1", encode("one"));
    await store.save("h1", "k1", encode("two"));
    await store.save("h2", "k9", encode("other host"));
    let got = await store.load("h1");
    expect(got?.catalog).toBe("k1");
    expect(got?.bodies.map(text)).toEqual(['"one"', '"two"']);
    await store.save("h1", "k2", encode("three"));
    got = await store.load("h1");
    expect(got?.catalog).toBe("k2");
    expect(got?.bodies.map(text)).toEqual(['"three"']);
    expect((await store.load("h2"))?.bodies.map(text)).toEqual(['"other host"']);
    await store.drop("h1");
    expect(await store.load("h1")).toBeNull();
    await store.close();
  });

  it("is bounded: the hosts used least recently go first, a host's replies past the limit start again", async () => {
    const store = new IdbStore(new IDBFactory(), { bytes: 20, chunks: 2 });
    await store.save("old", "k", encode("12345678")); // 10 bytes with its quotes
    await new Promise((r) => setTimeout(r, 2));
    await store.save("new", "k", encode("12345678"));
    await new Promise((r) => setTimeout(r, 2));
    await store.save("third", "k", encode("1234"));
    expect(await store.load("old")).toBeNull();
    expect((await store.load("new"))?.bodies).toHaveLength(1);
    await store.save("third", "k", encode("5"));
    await store.save("third", "k", encode("6"));
    expect((await store.load("third"))?.bodies.map(text)).toEqual(['"6"']);
    await store.save("huge", "k", encode("x".repeat(30)));
    expect(await store.load("huge")).toBeNull();
    await store.close();
  });

  it("says which hosts to drop to fit the limit, least recently used first, never the one kept", () => {
    const e = [
      { host: "a", bytes: 5, used: 3 },
      { host: "b", bytes: 5, used: 1 },
      { host: "c", bytes: 5, used: 2 },
    ];
    expect(evictions(e, "a", 15)).toEqual([]);
    expect(evictions(e, "a", 10)).toEqual(["b"]);
    expect(evictions(e, "b", 5)).toEqual(["c", "a"]);
  });
});

describe("KeptDefinitions over the browser's storage", () => {
  it("gives a new page the definitions an earlier page asked for: it asks for none, same tree", async () => {
    const factory = new IDBFactory();
    const first = await view(factory, "00000000000000c1", 2);
    expect(first.missing).toEqual(reply("").stacks.id);
    const second = await view(factory, "00000000000000c1", 2);
    expect(second.missing).toEqual([]);
    expect(second.loaded.asked).toBe(0);
    expect(second.loaded.frames).toEqual(first.loaded.frames);
    expect(second.loaded.layout).toEqual(first.loaded.layout);
  });

  it("keeps the definitions a reply carried for the next page too", async () => {
    const factory = new IDBFactory();
    const kept = new KeptDefinitions(new StackCache(), new IdbStore(factory));
    const load = await kept.read("h1", encode({ ...reply("00000000000000c1"), definitions: defs(2) }));
    expect(load.missing()).toEqual([]);
    const first = load.finish(null, load.inlined);
    await kept.save(load, null);
    const next = await view(factory, "00000000000000c1", 2);
    expect(next.missing).toEqual([]);
    expect(next.loaded.layout).toEqual(first.layout);
  });

  it("never shows definitions kept under another catalog key: it asks again and drops them", async () => {
    const factory = new IDBFactory();
    await view(factory, "00000000000000c1", 2);
    // The backend's database numbers vfs_read 42 now (its key says so): nothing kept is used.
    const after = await view(factory, "00000000000000c2", 42);
    expect(after.missing).toEqual(reply("").stacks.id);
    expect(after.loaded.frames.find((f) => f.name === "vfs_read")?.function_id).toBe(42);
    const kept = await new IdbStore(factory).load("h1");
    expect(kept?.catalog).toBe("00000000000000c2");
    expect(kept?.bodies).toHaveLength(1);
    const again = await view(factory, "00000000000000c2", 7);
    expect(again.missing).toEqual([]);
    expect(again.loaded.frames.find((f) => f.name === "vfs_read")?.function_id).toBe(42);
  });

  it("works without storage, and with a storage that fails (nothing kept)", async () => {
    const broken = {
      load: () => Promise.reject(new Error("blocked")),
      save: () => Promise.reject(new Error("quota")),
      drop: () => Promise.reject(new Error("blocked")),
    };
    for (const kept of [new KeptDefinitions(), new KeptDefinitions(new StackCache(), broken)]) {
      kept.open("h1");
      const load = await kept.read("h1", encode(reply("00000000000000c1")));
      expect(load.missing()).toHaveLength(2);
      const body = encode(defs(2));
      expect(load.finish(body, 2).layout.n).toBe(3); // the root, entry, vfs_read
      await kept.save(load, body);
    }
  });
});
