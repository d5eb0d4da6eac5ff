// SPDX-License-Identifier: Apache-2.0
// Stack definitions kept across page loads: the flame worker saves every /flamegraph/definitions reply
// it reads in the browser's IndexedDB, under the host and the catalog key its views' replies carry
// (FlameStacks.catalog: the definitions' format, the host's enrolment, its catalog pieces as the
// backend's database numbers them), and a new page of the same browser reads them back while its
// first view's samples are asked for, so that view asks for no frames it was sent before. Definitions
// kept under another catalog key are dropped, never shown. Bounded: MAX_BYTES in all, the hosts used
// least recently dropped first; a host's replies past MAX_CHUNKS start its store again.

/** What the browser keeps of one host: the catalog key and the definitions replies, oldest first. */
export interface StoredDefinitions {
  catalog: string;
  bodies: ArrayBuffer[];
}

export interface DefinitionStore {
  load(hostId: string): Promise<StoredDefinitions | null>;
  save(hostId: string, catalog: string, body: ArrayBuffer): Promise<void>;
  drop(hostId: string): Promise<void>;
}

/** Bytes of definitions kept in all (an hour of a busy host's stacks: ~4 MiB). */
export const MAX_BYTES = 64 * 1024 * 1024;
/** Replies kept per host before its store starts again with the newest one. */
export const MAX_CHUNKS = 64;

interface HostEntry {
  catalog: string;
  bytes: number;
  /** Replies kept: chunk keys are [host, 0 .. chunks - 1]. */
  chunks: number;
  /** When a view of the host last saved or read its definitions (ms since the epoch). */
  used: number;
}

/** The hosts to drop so that what is kept fits in `limit` bytes, least recently used first; `keep` (the
 *  host just saved) is never dropped. Pure. */
export function evictions(entries: { host: string; bytes: number; used: number }[], keep: string, limit: number) {
  let total = entries.reduce((s, e) => s + e.bytes, 0);
  const out: string[] = [];
  for (const e of [...entries].sort((a, b) => a.used - b.used)) {
    if (total <= limit) break;
    if (e.host === keep) continue;
    out.push(e.host);
    total -= e.bytes;
  }
  return out;
}

const DB = "hotpath-flame";
const HOSTS = "hosts";
const CHUNKS = "chunks";

const done = (req: IDBRequest) =>
  new Promise<void>((resolve, reject) => {
    req.onsuccess = () => resolve();
    req.onerror = () => reject(req.error ?? new Error("IndexedDB request failed"));
  });

const value = <T>(req: IDBRequest<T>) =>
  new Promise<T>((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error ?? new Error("IndexedDB request failed"));
  });

const finished = (tx: IDBTransaction) =>
  new Promise<void>((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error ?? new Error("IndexedDB transaction failed"));
    tx.onabort = () => reject(tx.error ?? new Error("IndexedDB transaction aborted"));
  });

const hostChunks = (hostId: string) => IDBKeyRange.bound([hostId, 0], [hostId, Infinity]);

/** The store in the browser's IndexedDB (`factory`: the worker's own `indexedDB`, or a test's). */
export class IdbStore implements DefinitionStore {
  private db: Promise<IDBDatabase> | null = null;

  constructor(
    private readonly factory: IDBFactory,
    private readonly limits = { bytes: MAX_BYTES, chunks: MAX_CHUNKS },
  ) {}

  private open(): Promise<IDBDatabase> {
    this.db ??= new Promise<IDBDatabase>((resolve, reject) => {
      const req = this.factory.open(DB, 1);
      req.onupgradeneeded = () => {
        req.result.createObjectStore(HOSTS);
        req.result.createObjectStore(CHUNKS);
      };
      req.onsuccess = () => {
        // Another page deleting or upgrading the database waits for no one: let go of it.
        req.result.onversionchange = () => {
          req.result.close();
          this.db = null;
        };
        resolve(req.result);
      };
      req.onerror = () => reject(req.error ?? new Error("IndexedDB could not be opened"));
    });
    return this.db;
  }

  async load(hostId: string): Promise<StoredDefinitions | null> {
    const tx = (await this.open()).transaction([HOSTS, CHUNKS], "readonly");
    const entry = await value(tx.objectStore(HOSTS).get(hostId) as IDBRequest<HostEntry | undefined>);
    if (!entry) return null;
    const bodies = await value(tx.objectStore(CHUNKS).getAll(hostChunks(hostId)) as IDBRequest<ArrayBuffer[]>);
    void this.touch(hostId).catch(() => undefined); // used now: the last to be dropped
    return { catalog: entry.catalog, bodies };
  }

  async save(hostId: string, catalog: string, body: ArrayBuffer): Promise<void> {
    if (body.byteLength > this.limits.bytes) return;
    const tx = (await this.open()).transaction([HOSTS, CHUNKS], "readwrite");
    const hosts = tx.objectStore(HOSTS);
    const chunks = tx.objectStore(CHUNKS);
    let entry = await value(hosts.get(hostId) as IDBRequest<HostEntry | undefined>);
    if (entry && (entry.catalog !== catalog || entry.chunks >= this.limits.chunks)) {
      void chunks.delete(hostChunks(hostId));
      entry = undefined;
    }
    const next: HostEntry = {
      catalog,
      bytes: (entry?.bytes ?? 0) + body.byteLength,
      chunks: (entry?.chunks ?? 0) + 1,
      used: Date.now(),
    };
    void chunks.put(body, [hostId, next.chunks - 1]);
    void hosts.put(next, hostId);
    const keys = (await value(hosts.getAllKeys())) as string[];
    const entries = (await value(hosts.getAll() as IDBRequest<HostEntry[]>)).map((e, k) => ({ ...e, host: keys[k] }));
    for (const host of evictions(entries, hostId, this.limits.bytes)) {
      void hosts.delete(host);
      void chunks.delete(hostChunks(host));
    }
    await finished(tx);
  }

  private async touch(hostId: string): Promise<void> {
    const tx = (await this.open()).transaction(HOSTS, "readwrite");
    const hosts = tx.objectStore(HOSTS);
    const entry = await value(hosts.get(hostId) as IDBRequest<HostEntry | undefined>);
    if (entry) void hosts.put({ ...entry, used: Date.now() }, hostId);
    await finished(tx);
  }

  async drop(hostId: string): Promise<void> {
    const tx = (await this.open()).transaction([HOSTS, CHUNKS], "readwrite");
    await Promise.all([
      done(tx.objectStore(HOSTS).delete(hostId)),
      done(tx.objectStore(CHUNKS).delete(hostChunks(hostId))),
    ]);
    await finished(tx);
  }

  /** Let go of the database (tests; a page's worker keeps it open for its life). */
  async close(): Promise<void> {
    if (this.db) (await this.db).close();
    this.db = null;
  }
}
