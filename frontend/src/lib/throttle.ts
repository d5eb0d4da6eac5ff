// SPDX-License-Identifier: Apache-2.0
// Coalesces bursts of live-update pushes per key: the first push for a key acts at once, later
// ones within the interval collapse into a single trailing call, so views stay live while the
// server is asked at most once per interval per key.
export interface KeyedThrottle {
  trigger(key: string, action: () => void): void;
  cancel(): void;
}

export function keyedThrottle(intervalMs: number, now: () => number = Date.now): KeyedThrottle {
  const last = new Map<string, number>();
  const pending = new Map<string, ReturnType<typeof setTimeout>>();
  const latest = new Map<string, () => void>();
  return {
    trigger(key, action) {
      latest.set(key, action);
      if (pending.has(key)) return;
      const since = now() - (last.get(key) ?? -Infinity);
      if (since >= intervalMs) {
        last.set(key, now());
        action();
        return;
      }
      pending.set(
        key,
        setTimeout(() => {
          pending.delete(key);
          last.set(key, now());
          latest.get(key)?.();
        }, intervalMs - since),
      );
    },
    cancel() {
      for (const t of pending.values()) clearTimeout(t);
      pending.clear();
    },
  };
}
