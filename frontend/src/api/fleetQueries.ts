// SPDX-License-Identifier: Apache-2.0
// Server state of the fleet views: the kernel-build groups (narrowed by label), a group's hot code over
// a range, the plans installed across the fleet, and the admin's edit of a host's labels. Keys start with "fleet"; a label edit refreshes
// them and the host.
import { queryOptions, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "./client";
import { keys, retry } from "./queries";
import type { FleetGroups, FleetHotCode, FleetPlans, Host } from "./types";
import { rangeKey, rangeQuery, type TimeRange } from "../lib/timeRange";

export type HotSort = "samples" | "hosts" | "name";

export const fleetKeys = {
  all: ["fleet"] as const,
  groups: (labels: string[]) => ["fleet", "groups", ...labels] as const,
  hotCode: (groupId: string, rest: unknown[]) => ["fleet", "hot-code", groupId, ...rest] as const,
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
