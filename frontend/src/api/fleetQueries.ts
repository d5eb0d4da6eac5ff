// SPDX-License-Identifier: Apache-2.0
// Server state of the fleet views: the kernel-build groups (narrowed by label), a group's hot code over
// a range, its flame graph and two sides of it compared, the plans installed across the fleet, and the admin's edit of a host's labels. Keys start with "fleet"; a label edit refreshes
// them and the host.
import { queryOptions, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "./client";
import { keys, retry } from "./queries";
import type { FleetGroups, FleetHotCode, FleetPlans, Host } from "./types";
import { rangeKey, rangeQuery, resolveRange, type TimeRange } from "../lib/timeRange";

export type HotSort = "samples" | "hosts" | "name";

export const fleetKeys = {
  all: ["fleet"] as const,
  groups: (labels: string[]) => ["fleet", "groups", ...labels] as const,
  hotCode: (groupId: string, rest: unknown[]) => ["fleet", "hot-code", groupId, ...rest] as const,
  flame: (groupId: string, rest: unknown[]) => ["fleet", "flame", groupId, ...rest] as const,
  flameDiff: (groupId: string, rest: unknown[]) => ["fleet", "flame-diff", groupId, ...rest] as const,
  plans: (rest: unknown[]) => ["fleet", "plans", ...rest] as const,
};

export const FLEET_PLANS_PAGE = 50;

export interface FleetPlanFilter {
  labels: string[];
  groupId: string | null;
  revertedWithinH: number;
  offset: number;
}

export const fleetPlansQuery = (f: FleetPlanFilter) =>
  queryOptions<FleetPlans, Error>({
    queryKey: fleetKeys.plans([f.labels, f.groupId, f.revertedWithinH, f.offset]),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/fleet/plans", {
          params: {
            query: {
              label: f.labels,
              ...(f.groupId ? { group_id: f.groupId } : {}),
              reverted_within_h: f.revertedWithinH,
              limit: FLEET_PLANS_PAGE,
              offset: f.offset,
            },
          },
        }),
      ),
    refetchInterval: 15_000,
  });

export function useFleetPlans(f: FleetPlanFilter) {
  return useQuery({ ...fleetPlansQuery(f), retry });
}

export const fleetGroupsQuery = (labels: string[]) =>
  queryOptions<FleetGroups, Error>({
    queryKey: fleetKeys.groups(labels),
    queryFn: () => unwrap(api.GET("/api/v1/fleet/groups", { params: { query: { label: labels, limit: 500 } } })),
    refetchInterval: 10_000,
  });

export function useFleetGroups(labels: string[], enabled = true) {
  return useQuery({ ...fleetGroupsQuery(labels), retry, enabled });
}

export const hotCodeQuery = (
  groupId: string,
  labels: string[],
  range: TimeRange,
  sort: HotSort,
  desc: boolean,
  minShare: number,
) =>
  queryOptions<FleetHotCode, Error>({
    queryKey: fleetKeys.hotCode(groupId, [labels, rangeKey(range), sort, desc, minShare]),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/fleet/groups/{group_id}/hot-code", {
          params: {
            path: { group_id: groupId },
            query: {
              label: labels,
              ...rangeQueryForFleet(range),
              sort,
              order: desc ? "desc" : "asc",
              min_share: minShare,
              limit: 100,
            },
          },
        }),
      ),
  });

/** The fleet reads whole minutes from the rollups: a relative range shorter than a minute asks for one. */
function rangeQueryForFleet(range: TimeRange) {
  const q = rangeQuery(range);
  return "window_s" in q ? { window_s: Math.max(60, q.window_s) } : q;
}

export function useHotCode(
  groupId: string,
  labels: string[],
  range: TimeRange,
  sort: HotSort,
  desc: boolean,
  minShare: number,
) {
  return useQuery({ ...hotCodeQuery(groupId, labels, range, sort, desc, minShare), retry });
}

export type FleetIdle = "exclude" | "include" | "only";

/** The group's flame graph: its hosts' stacks (those with every label) merged into one tree; the answer's
 *  bytes (a FleetFlameGraph), which the flame worker parses and lays out. */
export function useFleetFlame(groupId: string, labels: string[], range: TimeRange, idle: FleetIdle) {
  return useQuery<ArrayBuffer, Error>({
    queryKey: fleetKeys.flame(groupId, [labels, rangeKey(range), idle]),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/fleet/groups/{group_id}/flamegraph", {
          params: { path: { group_id: groupId }, query: { label: labels, ...rangeQueryForFleet(range), idle } },
          parseAs: "arrayBuffer",
        }),
      ),
    retry,
  });
}

/** One side of a comparison: hosts with every label of `labels` and none of `without`, over `range`
 *  (null: the page's range). */
export interface CompareSide {
  labels: string[];
  without: string[];
  range: TimeRange | null;
}

function sideQuery(prefix: "a" | "b", side: CompareSide) {
  const q: Record<string, string | string[]> = {
    [`${prefix}_label`]: side.labels,
    [`${prefix}_without`]: side.without,
  };
  if (side.range) {
    const r = resolveRange(side.range);
    q[`${prefix}_from`] = r.from.toISOString();
    q[`${prefix}_to`] = r.to.toISOString();
  }
  return q;
}

/** Two sides of the group as a differential flame graph (null: nothing to ask yet): the answer's bytes (a
 *  FleetFlameDiff), which the flame worker parses and lays out. */
export function useFleetFlameDiff(
  groupId: string,
  labels: string[],
  range: TimeRange,
  sides: { a: CompareSide; b: CompareSide } | null,
  idle: FleetIdle,
) {
  return useQuery<ArrayBuffer, Error>({
    queryKey: fleetKeys.flameDiff(groupId, [
      labels,
      rangeKey(range),
      idle,
      sides && [sides.a.labels, sides.a.without, sides.a.range && rangeKey(sides.a.range)],
      sides && [sides.b.labels, sides.b.without, sides.b.range && rangeKey(sides.b.range)],
    ]),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/fleet/groups/{group_id}/flamegraph/diff", {
          params: {
            path: { group_id: groupId },
            query: {
              label: labels,
              ...rangeQueryForFleet(range),
              idle,
              ...(sides ? sideQuery("a", sides.a) : {}),
              ...(sides ? sideQuery("b", sides.b) : {}),
            },
          },
          parseAs: "arrayBuffer",
        }),
      ),
    enabled: sides !== null,
    retry,
  });
}

export function useSetLabels() {
  const qc = useQueryClient();
  return useMutation<Host, Error, { hostId: string; labels: Record<string, string> | null }>({
    mutationFn: ({ hostId, labels }) =>
      unwrap(api.PUT("/api/v1/hosts/{host_id}/labels", { params: { path: { host_id: hostId } }, body: { labels } })),
    onSettled: (_d, _e, { hostId }) => {
      void qc.invalidateQueries({ queryKey: keys.host(hostId) });
      void qc.invalidateQueries({ queryKey: keys.hosts });
      void qc.invalidateQueries({ queryKey: fleetKeys.all });
    },
  });
}
