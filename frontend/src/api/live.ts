// SPDX-License-Identifier: Apache-2.0
// Live updates: one WebSocket per signed-in console. A view receives only what it shows: views
// register their topics (`hosts`, `host:<id>`, `measurement:<id>`) with useLiveTopics and the socket
// sends the union as a subscribe message whenever it changes and on every (re)connect. Host messages
// replace the host in the cache directly (status changes show at once); sample batches mark that
// host's hotness views stale, refetched at most once per second per host; target, command and
// measurement events mark their views stale; a plan's change of state (approved, installed, ...) marks
// that plan and the host's plan lists stale, so open plan pages follow at once. The socket reconnects
// with backoff.
import { useEffect, useState } from "react";
import { useQueryClient, type QueryClient } from "@tanstack/react-query";
import { measureKeys } from "./measureQueries";
import { commandQuery, hostQuery, hostsQuery, keys, modulesQuery } from "./queries";
import type { LiveMessage } from "./types";
import { keyedThrottle, type KeyedThrottle } from "../lib/throttle";

export type LiveState = "connecting" | "open" | "closed";

export function liveUrl(token: string, loc: Pick<Location, "protocol" | "host"> = window.location): string {
  const scheme = loc.protocol === "https:" ? "wss" : "ws";
  return `${scheme}://${loc.host}/api/v1/ws?token=${encodeURIComponent(token)}`;
}

// The topics the views on screen want, counted per view (two views may want the same one).
const topicCounts = new Map<string, number>();
const topicListeners = new Set<() => void>();

export function currentTopics(): string[] {
  return [...topicCounts.keys()].sort();
}

function topicsChanged() {
  for (const l of topicListeners) l();
}

/** Subscribe the live socket to these topics while the calling view is mounted. */
export function useLiveTopics(topics: (string | null | undefined)[]): void {
  const key = topics
    .filter((t): t is string => !!t)
    .sort()
    .join("\n");
  useEffect(() => {
    const list = key ? key.split("\n") : [];
    for (const t of list) topicCounts.set(t, (topicCounts.get(t) ?? 0) + 1);
    topicsChanged();
    return () => {
      for (const t of list) {
        const n = (topicCounts.get(t) ?? 1) - 1;
        if (n <= 0) topicCounts.delete(t);
        else topicCounts.set(t, n);
      }
      topicsChanged();
    };
  }, [key]);
}

/** Pushed data marks live views stale about once a second. A refetch that is still running is left to
 * finish rather than cancelled and restarted: when an answer takes longer than the push interval (a
 * loaded server, a long range), cancelling would restart it forever and the view would never show
 * the new data. The next push after it finishes refetches again. */
const LET_RUNNING_FETCHES_FINISH = { cancelRefetch: false } as const;

/** Apply one pushed message to the query cache. */
export function applyLiveMessage(qc: QueryClient, msg: LiveMessage, throttle: KeyedThrottle): void {
  if (msg.type === "host") {
    const host = msg.host;
    qc.setQueryData(hostsQuery().queryKey, (old) => {
      if (!old) return old;
      const i = old.findIndex((h) => h.id === host.id);
      if (i < 0) return [...old, host];
      const next = old.slice();
      next[i] = host;
      return next;
    });
    qc.setQueryData(hostQuery(host.id).queryKey, host);
    // A newly complete catalog is worth fetching (pieces are content-addressed, so only the module
    // list can change).
    if (host.catalog_complete) void qc.invalidateQueries({ queryKey: modulesQuery(host.id).queryKey });
  } else if (msg.type === "targets") {
    void qc.invalidateQueries({ queryKey: measureKeys.targets(msg.host_id) });
    void qc.invalidateQueries({ queryKey: measureKeys.measurements(msg.host_id) });
  } else if (msg.type === "command") {
    const hostId = msg.command.host_id;
    qc.setQueryData(commandQuery(hostId, msg.command.id).queryKey, msg.command);
    if (msg.command.state === "done" || msg.command.state === "failed") {
      void qc.invalidateQueries({ queryKey: measureKeys.targets(hostId) });
      void qc.invalidateQueries({ queryKey: measureKeys.measurements(hostId) });
    }
  } else if (msg.type === "measurement") {
    const { host_id: hostId, measurement_id: mid } = msg;
    throttle.trigger(`measurement:${mid}`, () => {
      void qc.invalidateQueries(
        { queryKey: measureKeys.measurement(hostId, mid), predicate: (q) => q.meta?.live !== false },
        LET_RUNNING_FETCHES_FINISH,
      );
    });
  } else if (msg.type === "plan") {
    void qc.invalidateQueries({ queryKey: keys.plan(msg.host_id, msg.plan_id) });
    void qc.invalidateQueries({ queryKey: keys.plans(msg.host_id) });
  } else if (msg.type === "gap") {
    void qc.invalidateQueries({ queryKey: keys.coverageAll(msg.host_id) });
  } else if (msg.type === "samples") {
    const hostId = msg.host_id;
    throttle.trigger(`samples:${hostId}`, () => {
      for (const queryKey of [
        keys.topAll(hostId),
        keys.hotnessAll(hostId),
        keys.samplesAll(hostId),
        keys.timelineAll(hostId),
      ]) {
        // Paused views and fixed (absolute) ranges stay as they are.
        void qc.invalidateQueries({ queryKey, predicate: (q) => q.meta?.live !== false }, LET_RUNNING_FETCHES_FINISH);
      }
    });
  }
}

const LIVE_TYPES = new Set(["host", "samples", "gap", "ping", "targets", "command", "measurement", "plan"]);

export function parseLiveMessage(data: unknown): LiveMessage | null {
  if (typeof data !== "string") return null;
  try {
    const msg = JSON.parse(data) as { type?: unknown };
    if (msg && typeof msg.type === "string" && LIVE_TYPES.has(msg.type)) {
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
        sendTopics();
        // Whatever was pushed while disconnected is caught up by one refresh.
        void qc.invalidateQueries({ queryKey: hostsQuery().queryKey });
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
    const sendTopics = () => {
      if (socket?.readyState === WebSocket.OPEN) {
        socket.send(JSON.stringify({ type: "subscribe", topics: currentTopics() }));
      }
    };
    topicListeners.add(sendTopics);
    connect();
    return () => {
      topicListeners.delete(sendTopics);
      stopped = true;
      clearTimeout(retryTimer);
      throttle.cancel();
      socket?.close();
    };
  }, [token, qc]);
  return state;
}
