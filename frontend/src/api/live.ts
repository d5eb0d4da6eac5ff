// SPDX-License-Identifier: Apache-2.0
// Live updates: one WebSocket per signed-in console. Host messages replace the host in the cache
// directly (status changes show at once); sample batches mark that host's hotness views stale,
// refetched at most once per second per host. The socket reconnects with backoff.
import { useEffect, useState } from "react";
import { useQueryClient, type QueryClient } from "@tanstack/react-query";
import { keys } from "./queries";
import type { Host, LiveMessage } from "./types";
import { keyedThrottle, type KeyedThrottle } from "../lib/throttle";

export type LiveState = "connecting" | "open" | "closed";

export function liveUrl(token: string, loc: Pick<Location, "protocol" | "host"> = window.location): string {
  const scheme = loc.protocol === "https:" ? "wss" : "ws";
  return `${scheme}://${loc.host}/api/v1/ws?token=${encodeURIComponent(token)}`;
}

/** Apply one pushed message to the query cache. */
export function applyLiveMessage(qc: QueryClient, msg: LiveMessage, throttle: KeyedThrottle): void {
  if (msg.type === "host") {
    const host = msg.host;
    qc.setQueryData<Host[]>(keys.hosts, (old) => {
      if (!old) return old;
      const i = old.findIndex((h) => h.id === host.id);
      if (i < 0) return [...old, host];
      const next = old.slice();
      next[i] = host;
      return next;
    });
    qc.setQueryData<Host>(keys.host(host.id), host);
    // A newly complete catalog is worth fetching (pieces are content-addressed, so only the module
    // list can change).
    if (host.catalog_complete) void qc.invalidateQueries({ queryKey: keys.modules(host.id) });
  } else if (msg.type === "gap") {
    void qc.invalidateQueries({ queryKey: ["host", msg.host_id, "coverage"] });
  } else if (msg.type === "samples") {
    const hostId = msg.host_id;
    throttle.trigger(`samples:${hostId}`, () => {
      for (const part of ["top", "hotness", "samples", "timeline"]) {
        // Paused views and fixed (absolute) ranges stay as they are.
        void qc.invalidateQueries({ queryKey: ["host", hostId, part], predicate: (q) => q.meta?.live !== false });
      }
    });
  }
}

export function parseLiveMessage(data: unknown): LiveMessage | null {
  if (typeof data !== "string") return null;
  try {
    const msg = JSON.parse(data) as { type?: unknown };
    if (msg && (msg.type === "host" || msg.type === "samples" || msg.type === "gap" || msg.type === "ping")) {
      return msg as LiveMessage;
    }
  } catch {
    // A malformed frame is dropped; the fallback polling keeps views correct.
  }
  return null;
}

export function useLiveUpdates(token: string | null): LiveState {
  const qc = useQueryClient();
  const [state, setState] = useState<LiveState>("closed");
  useEffect(() => {
    if (!token || typeof WebSocket === "undefined") return;
    const throttle = keyedThrottle(1000);
    let socket: WebSocket | null = null;
    let retryTimer: ReturnType<typeof setTimeout> | undefined;
    let attempts = 0;
    let stopped = false;
    const connect = () => {
      setState("connecting");
      socket = new WebSocket(liveUrl(token));
      socket.onopen = () => {
        attempts = 0;
        setState("open");
        // Whatever was pushed while disconnected is caught up by one refresh.
        void qc.invalidateQueries({ queryKey: keys.hosts });
      };
      socket.onmessage = (ev) => {
        const msg = parseLiveMessage(ev.data);
        if (msg) applyLiveMessage(qc, msg, throttle);
      };
      socket.onclose = () => {
        setState("closed");
        if (stopped) return;
        attempts += 1;
        retryTimer = setTimeout(connect, Math.min(10_000, 500 * 2 ** Math.min(attempts, 5)));
      };
    };
    connect();
    return () => {
      stopped = true;
      clearTimeout(retryTimer);
      throttle.cancel();
      socket?.close();
    };
  }, [token, qc]);
  return state;
}
