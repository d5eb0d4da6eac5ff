// SPDX-License-Identifier: Apache-2.0
import { act, renderHook } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { useWorker, type WorkerJob } from "./useWorker";

/** A stand-in Worker: records what it is sent and lets the test reply. */
class FakeWorker {
  static made: FakeWorker[] = [];
  sent: { id: number; n: number }[] = [];
  terminated = false;
  onmessage: ((ev: MessageEvent) => void) | null = null;
  onerror: ((ev: ErrorEvent) => void) | null = null;
  constructor() {
    FakeWorker.made.push(this);
  }
  postMessage(m: { id: number; n: number }) {
    this.sent.push(m);
  }
  terminate() {
    this.terminated = true;
  }
  reply(data: unknown) {
    this.onmessage?.({ data } as MessageEvent);
  }
}

const create = () => new FakeWorker() as unknown as Worker;

function job(n: number, got: number[], last = true): WorkerJob<{ n: number }, { id: number; v: number }> {
  return {
    request: { n },
    inline: () => got.push(-n),
    onReply: (r) => {
      got.push(r.v);
      return last;
    },
  };
}

afterEach(() => {
  FakeWorker.made = [];
  vi.unstubAllGlobals();
});

describe("useWorker", () => {
  it("sends each job with a fresh id, ignores replies of a replaced job and ends its worker", () => {
    vi.stubGlobal("Worker", FakeWorker);
    const got: number[] = [];
    const { rerender, unmount } = renderHook(({ j }) => useWorker(create, j), { initialProps: { j: job(1, got) } });
    const [first] = FakeWorker.made;
    const firstId = first.sent[0].id;
    expect(first.sent).toEqual([{ id: firstId, n: 1 }]);
    rerender({ j: job(2, got) });
    expect(first.terminated).toBe(true);
    const second = FakeWorker.made[1];
    const secondId = second.sent[0].id;
    expect(secondId).not.toBe(firstId);
    act(() => second.reply({ id: firstId, v: 10 }));
    expect(got).toEqual([]);
    act(() => second.reply({ id: secondId, v: 20 }));
    expect(got).toEqual([20]);
    expect(second.terminated).toBe(true);
    unmount();
  });

  it("keeps one worker for every job when asked, ending it on unmount", () => {
    vi.stubGlobal("Worker", FakeWorker);
    const got: number[] = [];
    const { rerender, unmount } = renderHook(({ j }) => useWorker(create, j, true), {
      initialProps: { j: job(1, got) },
    });
    rerender({ j: job(2, got) });
    expect(FakeWorker.made).toHaveLength(1);
    const w = FakeWorker.made[0];
    expect(w.sent.map((m) => m.n)).toEqual([1, 2]);
    act(() => w.reply({ id: w.sent[1].id, v: 2 }));
    expect(got).toEqual([2]);
    expect(w.terminated).toBe(false);
    unmount();
    expect(w.terminated).toBe(true);
  });

  it("runs the job inline in a macrotask where no Worker exists", async () => {
    vi.stubGlobal("Worker", undefined);
    const got: number[] = [];
    renderHook(() => useWorker(create, job(3, got)));
    expect(got).toEqual([]);
    await act(() => new Promise((r) => setTimeout(r, 0)));
    expect(got).toEqual([-3]);
  });
});
