// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { keyedThrottle } from "./throttle";

describe("keyedThrottle", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("acts at once, then coalesces a burst into one trailing call per interval", () => {
    const t = keyedThrottle(1000, () => Date.now());
    const calls: string[] = [];
    t.trigger("h1", () => calls.push("a"));
    for (let i = 0; i < 10; i++) t.trigger("h1", () => calls.push(`b${i}`));
    expect(calls).toEqual(["a"]);
    vi.advanceTimersByTime(999);
    expect(calls).toEqual(["a"]);
    vi.advanceTimersByTime(1);
    // Only the latest action of the burst runs.
    expect(calls).toEqual(["a", "b9"]);
  });

  it("keeps keys independent and cancels pending calls", () => {
    const t = keyedThrottle(1000, () => Date.now());
    const calls: string[] = [];
    t.trigger("h1", () => calls.push("h1"));
    t.trigger("h2", () => calls.push("h2"));
    t.trigger("h1", () => calls.push("h1-late"));
    t.cancel();
    vi.advanceTimersByTime(5000);
    expect(calls).toEqual(["h1", "h2"]);
  });
});
