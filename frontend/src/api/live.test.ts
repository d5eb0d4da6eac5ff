// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { QueryClient, QueryObserver } from "@tanstack/react-query";
import { applyLiveMessage, liveUrl, parseLiveMessage } from "./live";
import { keys } from "./queries";
import { keyedThrottle } from "../lib/throttle";
import { host } from "../test/fixtures";
import type { Host } from "./types";

describe("live updates", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("builds the WebSocket URL on the page's origin with the token", () => {
    expect(liveUrl("a b", { protocol: "https:", host: "console.example:8443" })).toBe(
      "wss://console.example:8443/api/v1/ws?token=a%20b",
    );
    expect(liveUrl("t", { protocol: "http:", host: "127.0.0.1:8080" })).toBe("ws://127.0.0.1:8080/api/v1/ws?token=t");
  });

  it("accepts only known message types", () => {
    expect(parseLiveMessage('{"type":"ping"}')).toEqual({ type: "ping" });
    expect(parseLiveMessage("{not json")).toBeNull();
    expect(parseLiveMessage('{"type":"other"}')).toBeNull();
    expect(parseLiveMessage(new ArrayBuffer(2))).toBeNull();
  });

  it("replaces a pushed host in the host list and the host's own entry", () => {
    const qc = new QueryClient();
    qc.setQueryData<Host[]>(keys.hosts, [host(), host({ id: "host-2", hostname: "box2" })]);
    const offline = host({ online: false });
    applyLiveMessage(qc, { type: "host", host: offline }, keyedThrottle(1000));
    expect(qc.getQueryData<Host[]>(keys.hosts)?.map((h) => [h.id, h.online])).toEqual([
      ["host-1", false],
      ["host-2", true],
    ]);
    expect(qc.getQueryData<Host>(keys.host("host-1"))?.online).toBe(false);
    applyLiveMessage(qc, { type: "host", host: host({ id: "host-3" }) }, keyedThrottle(1000));
    expect(qc.getQueryData<Host[]>(keys.hosts)).toHaveLength(3);
  });

  it("marks a host's hotness views stale at most once per second", () => {
    const qc = new QueryClient();
    const spy = vi.spyOn(qc, "invalidateQueries");
    const throttle = keyedThrottle(1000);
    const msg = { type: "samples" as const, host_id: "host-1", interval_start: "", total_samples: 5, top: [] };
    for (let i = 0; i < 5; i++) applyLiveMessage(qc, msg, throttle);
    expect(spy.mock.calls.map((c) => c[0]?.queryKey)).toEqual([
      ["host", "host-1", "top"],
      ["host", "host-1", "hotness"],
      ["host", "host-1", "samples"],
      ["host", "host-1", "timeline"],
    ]);
    vi.advanceTimersByTime(1000);
    expect(spy).toHaveBeenCalledTimes(8);
  });

  it("lets a live view's running refetch finish when samples are pushed faster than it answers", async () => {
    // (Real timers: the query cache schedules its notifications with setTimeout.)
    vi.useRealTimers();
    const qc = new QueryClient();
    const answers: ((n: number) => void)[] = [];
    const aborted: boolean[] = [];
    const observer = new QueryObserver(qc, {
      queryKey: ["host", "host-1", "top", "live"],
      queryFn: ({ signal }) =>
        new Promise<number>((resolve) => {
          const i = answers.length;
          aborted.push(false);
          signal.addEventListener("abort", () => (aborted[i] = true));
          answers.push(resolve);
        }),
      meta: { live: true },
    });
    const stop = observer.subscribe(() => {});
    await vi.waitFor(() => expect(answers).toHaveLength(1));
    answers[0](1);
    await vi.waitFor(() => expect(observer.getCurrentResult().data).toBe(1));
    const push = () =>
      applyLiveMessage(
        qc,
        { type: "samples", host_id: "host-1", interval_start: "", total_samples: 5, top: [] },
        keyedThrottle(1000),
      );
    // The first push starts a refetch; two more arrive while the server is still answering it.
    push();
    await vi.waitFor(() => expect(answers).toHaveLength(2));
    push();
    push();
    await new Promise((r) => setTimeout(r, 20));
    expect(aborted).toEqual([false, false]);
    expect(answers).toHaveLength(2);
    answers[1](2);
    await vi.waitFor(() => expect(observer.getCurrentResult().data).toBe(2));
    stop();
  });

  it("leaves paused views and fixed ranges alone", async () => {
    const qc = new QueryClient();
    let liveCalls = 0;
    let fixedCalls = 0;
    const live = qc.fetchQuery({
      queryKey: ["host", "host-1", "top", "live"],
      queryFn: () => ++liveCalls,
      meta: { live: true },
    });
    const fixed = qc.fetchQuery({
      queryKey: ["host", "host-1", "top", "fixed"],
      queryFn: () => ++fixedCalls,
      meta: { live: false },
    });
    await Promise.all([live, fixed]);
    const spy = vi.spyOn(qc, "invalidateQueries");
    applyLiveMessage(
      qc,
      { type: "samples", host_id: "host-1", interval_start: "", total_samples: 5, top: [] },
      keyedThrottle(1000),
    );
    const predicate = spy.mock.calls[0][0]!.predicate!;
    expect(predicate(qc.getQueryCache().find({ queryKey: ["host", "host-1", "top", "live"] })!)).toBe(true);
    expect(predicate(qc.getQueryCache().find({ queryKey: ["host", "host-1", "top", "fixed"] })!)).toBe(false);
  });

  it("refreshes an open plan page and the host's plan lists when a plan changes state", () => {
    const msg = parseLiveMessage('{"type":"plan","host_id":"host-1","plan_id":"p-1","state":"approved"}');
    expect(msg).toEqual({ type: "plan", host_id: "host-1", plan_id: "p-1", state: "approved" });
    const qc = new QueryClient();
    const spy = vi.spyOn(qc, "invalidateQueries");
    applyLiveMessage(qc, msg!, keyedThrottle(1000));
    expect(spy.mock.calls.map((c) => c[0]?.queryKey)).toEqual([
      ["host", "host-1", "plan", "p-1"],
      ["host", "host-1", "plans"],
    ]);
  });
});
