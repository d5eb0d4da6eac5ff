// SPDX-License-Identifier: Apache-2.0
// Server state of staged roll-outs (issue 19): the list (all, or one plan's), one roll-out with its waves
// and hosts, its audit trail, and the operator's actions (start, pause, resume, revert everywhere).
// Keys start with "rollouts". Roll-outs are not pushed on the live channel: an active one is polled every
// 2 s, an ended one is read once.
import { queryOptions, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "./client";
import { retry } from "./queries";
import type { Rollout, RolloutAuditEntry, RolloutCreate, RolloutDetail } from "./types";

/** The states in which a roll-out still changes by itself (the rest change only by an operator's revert). */
const ACTIVE: readonly string[] = ["running", "paused", "reverting"];
const POLL_MS = 2000;

export const rolloutKeys = {
  all: ["rollouts"] as const,
  list: (planId: string | null) => ["rollouts", "list", planId ?? ""] as const,
  one: (id: string) => ["rollouts", "one", id] as const,
  audit: (id: string, version: string) => ["rollouts", "one", id, "audit", version] as const,
};

const active = (r: { state: string } | undefined) => r !== undefined && ACTIVE.includes(r.state);

export const rolloutsQuery = (planId: string | null) =>
  queryOptions<Rollout[], Error>({
    queryKey: rolloutKeys.list(planId),
    queryFn: () => unwrap(api.GET("/api/v1/rollouts", { params: { query: { plan_id: planId, limit: 100 } } })),
    // Polled while one of them is active; else every 10 s (a roll-out another operator starts shows).
    refetchInterval: (q) => (q.state.data?.some(active) ? POLL_MS : 10_000),
  });

export function useRollouts(planId: string | null, enabled = true) {
  return useQuery({ ...rolloutsQuery(planId), retry, enabled });
}

export const rolloutQuery = (id: string) =>
  queryOptions<RolloutDetail, Error>({
    queryKey: rolloutKeys.one(id),
    queryFn: () => unwrap(api.GET("/api/v1/rollouts/{rollout_id}", { params: { path: { rollout_id: id } } })),
    refetchInterval: (q) => (active(q.state.data) ? POLL_MS : false),
  });

export function useRollout(id: string, enabled = true) {
  return useQuery({ ...rolloutQuery(id), retry, enabled });
}

/** The audit trail, read again whenever the roll-out's record changes (`version`: its updated_at). */
export function useRolloutAudit(id: string, version: string) {
  return useQuery<RolloutAuditEntry[], Error>({
    queryKey: rolloutKeys.audit(id, version),
    queryFn: () => unwrap(api.GET("/api/v1/rollouts/{rollout_id}/audit", { params: { path: { rollout_id: id } } })),
    retry,
  });
}

export function useStartRollout() {
  const qc = useQueryClient();
  return useMutation<RolloutDetail, Error, RolloutCreate>({
    mutationFn: (body) => unwrap(api.POST("/api/v1/rollouts", { body })),
    onSuccess: (r) => {
      qc.setQueryData(rolloutKeys.one(r.id), r);
      void qc.invalidateQueries({ queryKey: rolloutKeys.all });
    },
  });
}

export type RolloutAction = "pause" | "resume" | "revert";

export function useRolloutAction(id: string) {
  const qc = useQueryClient();
  return useMutation<RolloutDetail, Error, RolloutAction>({
    mutationFn: (action) => {
      const params = { path: { rollout_id: id } };
      switch (action) {
        case "pause":
          return unwrap(api.POST("/api/v1/rollouts/{rollout_id}/pause", { params }));
        case "resume":
          return unwrap(api.POST("/api/v1/rollouts/{rollout_id}/resume", { params }));
        case "revert":
          return unwrap(api.POST("/api/v1/rollouts/{rollout_id}/revert", { params }));
      }
    },
    onSuccess: (r) => {
      qc.setQueryData(rolloutKeys.one(id), r);
      void qc.invalidateQueries({ queryKey: rolloutKeys.all });
    },
  });
}
