// SPDX-License-Identifier: Apache-2.0
// Server state for every screen, as TanStack Query hooks over the typed client. Query keys start
// with the host id so a live update for one host refreshes only that host's views. A query that views
// ask for in more than one way (one at a time, or many with useQueries) is a `queryOptions` factory
// (`…Query`) here, and each view adds only its own retry and enabled choices.
import { keepPreviousData, queryOptions, useMutation, useQueries, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, ApiError, unwrap } from "./client";
import type {
  Comparison, DataCoverage, EnrolmentRequest, EnrolmentToken, EnrolmentTokenCreated, FlameDiffData,
  FunctionCalls, FunctionDetail, FunctionSamples, Host, Hotness, InstructionSamples, Instructions, Module, Timeline,
  TopFunctions, User, UserCreate, UserDetail, UserUpdate, Plan, PlanDetail, PlanAuditEntry, Command,
} from "./types";
import { rangeKey, rangeQuery, type TimeRange } from "../lib/timeRange";

export const keys = {
  me: ["me"] as const,
  hosts: ["hosts"] as const,
  host: (hostId: string) => ["host", hostId] as const,
  modules: (hostId: string) => ["host", hostId, "modules"] as const,
  catalog: (digest: string) => ["catalog", digest] as const,
  fn: (hostId: string, fid: number, target = "kernel") => ["host", hostId, "function", fid, target] as const,
  instructions: (hostId: string, fid: number, target = "kernel") => ["host", hostId, "function", fid, target, "instructions"] as const,
  samples: (hostId: string, fid: number, range: string) => ["host", hostId, "samples", fid, range] as const,
  top: (hostId: string, range: string, rest: unknown[] = []) => ["host", hostId, "top", range, ...rest] as const,
  hotness: (hostId: string, range: string) => ["host", hostId, "hotness", range] as const,
  timeline: (hostId: string, range: string) => ["host", hostId, "timeline", range] as const,
  compare: (hostId: string, rest: unknown[]) => ["host", hostId, "compare", ...rest] as const,
  coverage: (hostId: string, windowS: number) => ["host", hostId, "coverage", windowS] as const,
  flame: (hostId: string, rest: unknown[]) => ["host", hostId, "flame", ...rest] as const,
  flameDiff: (hostId: string, rest: unknown[]) => ["host", hostId, "flame-diff", ...rest] as const,
  calls: (hostId: string, fid: number, rest: unknown[]) => ["host", hostId, "calls", fid, ...rest] as const,
  // Under "samples", so live pushes refresh it with the function's block samples.
  insnSamples: (hostId: string, fid: number, range: string) => ["host", hostId, "samples", fid, "instructions", range] as const,
  plans: (hostId: string) => ["host", hostId, "plans"] as const,
  plan: (hostId: string, planId: string) => ["host", hostId, "plan", planId] as const,
  command: (hostId: string, commandId: string) => ["host", hostId, "command", commandId] as const,
  enrolmentTokens: ["admin", "enrolment-tokens"] as const,
  enrolmentRequests: ["admin", "enrolment-requests"] as const,
  users: ["admin", "users"] as const,
};

/** How a sample view refreshes: live views (a relative range, not paused) follow new samples; the
 *  others are fixed and are not refetched (their `meta.live` is false, which live pushes respect).
 *  No placeholder data: a refresh of the same range keeps its rows (same query key), but a new range,
 *  sort or page has no data until its own answer arrives, so nothing is shown under a label it does not
 *  belong to (views show a busy state meanwhile). */
export function liveOptions(live: boolean) {
  return {
    refetchInterval: live ? LIVE_FALLBACK_MS : (false as const),
    staleTime: live ? 0 : Infinity,
    meta: { live },
  };
}

/** Retry transient failures only: a 4xx answer will not change by asking again. */
function retry(count: number, error: unknown): boolean {
  if (error instanceof ApiError && error.status >= 400 && error.status < 500) return false;
  return count < 2;
}

/** Fallback refresh for live views, in case the WebSocket is down; pushes refresh sooner. */
const LIVE_FALLBACK_MS = 5000;

export function useMe(enabled: boolean) {
  return useQuery<User, Error>({
    queryKey: keys.me,
    queryFn: () => unwrap(api.GET("/api/v1/auth/me")),
    enabled,
    retry,
    staleTime: 60_000,
  });
}

export function useHosts() {
  return useQuery<Host[], Error>({
    queryKey: keys.hosts,
    queryFn: () => unwrap(api.GET("/api/v1/hosts")),
    retry,
    refetchInterval: 10_000,
  });
}

export function useHost(hostId: string) {
  return useQuery<Host, Error>({
    queryKey: keys.host(hostId),
    queryFn: () => unwrap(api.GET("/api/v1/hosts/{host_id}", { params: { path: { host_id: hostId } } })),
    retry,
    refetchInterval: 10_000,
  });
}

export function useModules(hostId: string, enabled = true) {
  return useQuery<Module[], Error>({
    queryKey: keys.modules(hostId),
    queryFn: () => unwrap(api.GET("/api/v1/hosts/{host_id}/modules", { params: { path: { host_id: hostId } } })),
    retry,
    enabled,
    staleTime: 60_000,
  });
}

/** A host's catalog: its modules, then each complete module's content-addressed piece. The pieces
 *  never change, so they are kept for the session and the browser caches them for good. */
export function useCatalogPieces(hostId: string) {
  const modules = useModules(hostId);
  const complete = (modules.data ?? []).filter((m) => m.complete);
  const pieces = useQueries({
    queries: complete.map((m) => ({
      queryKey: keys.catalog(m.digest),
      queryFn: () => unwrap(api.GET("/api/v1/catalogs/{digest}", { params: { path: { digest: m.digest } } })),
      staleTime: Infinity,
      gcTime: Infinity,
      retry,
    })),
  });
  return { modules, complete, pieces };
}

/** A function with its blocks, at its address in `target` (the kernel, or an attached process). */
export const functionDetailQuery = (hostId: string, fid: number, target = "kernel") =>
  queryOptions<FunctionDetail, Error>({
    queryKey: keys.fn(hostId, fid, target),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/functions/{function_id}", {
          params: { path: { host_id: hostId, function_id: fid }, query: { target } },
        }),
      ),
    staleTime: Infinity,
  });

export function useFunctionDetail(hostId: string, fid: number, enabled = true, target = "kernel") {
  return useQuery({ ...functionDetailQuery(hostId, fid, target), retry, enabled });
}

export function useInstructions(hostId: string, fid: number, enabled: boolean, target = "kernel") {
  return useQuery<Instructions, Error>({
    queryKey: keys.instructions(hostId, fid, target),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/functions/{function_id}/instructions", {
          params: { path: { host_id: hostId, function_id: fid }, query: { target } },
        }),
      ),
    // 502/503/504 carry a reason the panel shows; retrying an offline host only delays it.
    retry: false,
    enabled,
    // The instructions are the build's (the backend caches them), but where a measurement's probe sits
    // is live: a panel opened again, or the window refocused, after 5 s asks again (served from the cache).
    staleTime: 5_000,
  });
}

/** A function's samples per block over the range (a live range follows new samples). */
export const functionSamplesQuery = (hostId: string, fid: number, range: TimeRange, live: boolean) =>
  queryOptions<FunctionSamples, Error>({
    queryKey: keys.samples(hostId, fid, rangeKey(range)),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/functions/{function_id}/samples", {
          params: { path: { host_id: hostId, function_id: fid }, query: rangeQuery(range) },
        }),
      ),
    ...liveOptions(live),
  });

export function useFunctionSamples(hostId: string, fid: number, range: TimeRange, live: boolean, enabled = true) {
  return useQuery({ ...functionSamplesQuery(hostId, fid, range, live), retry, enabled });
}

export interface TopQuery {
  limit: number;
  offset: number;
  sort: "samples" | "inclusive" | "name" | "module";
  desc: boolean;
  includeIdle: boolean;
}

export function useTopFunctions(hostId: string, range: TimeRange, live: boolean, q: TopQuery) {
  return useQuery<TopFunctions, Error>({
    queryKey: keys.top(hostId, rangeKey(range), [q.limit, q.offset, q.sort, q.desc, q.includeIdle]),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/top-functions", {
          params: {
            path: { host_id: hostId },
            query: { ...rangeQuery(range), limit: q.limit, offset: q.offset, sort: q.sort, order: q.desc ? "desc" : "asc",
                     include_idle: q.includeIdle },
          },
        }),
      ),
    retry,
    ...liveOptions(live),
  });
}

export function useHotness(hostId: string, range: TimeRange, live: boolean, enabled = true) {
  return useQuery<Hotness, Error>({
    queryKey: keys.hotness(hostId, rangeKey(range)),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/hotness", {
          params: { path: { host_id: hostId }, query: rangeQuery(range) },
        }),
      ),
    retry,
    enabled,
    ...liveOptions(live),
  });
}

export function useTimeline(hostId: string, range: TimeRange, live: boolean, points = 240) {
  return useQuery<Timeline, Error>({
    queryKey: keys.timeline(hostId, rangeKey(range)),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/timeline", {
          params: { path: { host_id: hostId }, query: { ...rangeQuery(range), points } },
        }),
      ),
    retry,
    ...liveOptions(live),
  });
}

export interface CompareQuery {
  a: { from: string; to: string };
  b: { from: string; to: string };
  bHost: string | null;
  includeIdle: boolean;
  limit: number;
}

export function useCompare(hostId: string, q: CompareQuery | null) {
  return useQuery<Comparison, Error>({
    queryKey: keys.compare(hostId, [q]),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/compare", {
          params: {
            path: { host_id: hostId },
            query: { a_from: q!.a.from, a_to: q!.a.to, b_from: q!.b.from, b_to: q!.b.to, b_host: q!.bHost ?? undefined,
                     include_idle: q!.includeIdle, limit: q!.limit },
          },
        }),
      ),
    retry,
    enabled: q !== null,
    staleTime: Infinity,
  });
}

/** Which samples a stack view covers (see the API's StackFilter). */
export interface StackFilter {
  pid: number | null;
  comm: string | null;
  cpu: number | null;
  idle: "exclude" | "include" | "only";
}

function filterQuery(f: StackFilter) {
  return { pid: f.pid ?? undefined, comm: f.comm ?? undefined, cpu: f.cpu ?? undefined, idle: f.idle };
}

/** Stack views recompute a tree over the whole range on the server: live ones refresh every 10 s, not on
 *  every pushed interval. */
const STACKS_LIVE_MS = 10_000;

function stackLiveOptions(live: boolean) {
  return {
    refetchInterval: live ? STACKS_LIVE_MS : (false as const),
    staleTime: live ? STACKS_LIVE_MS : Infinity,
    meta: { live: false },
  };
}

/** The flame graph, its reply's bytes unparsed and handed to `read` (the flame feature parses them in a
 *  worker: an hour's reply is megabytes of JSON), whose result is cached. */
export function useFlameGraph<T>(hostId: string, range: TimeRange, live: boolean, filter: StackFilter,
  read: (body: ArrayBuffer, signal: AbortSignal) => Promise<T>, enabled = true) {
  return useQuery<T, Error>({
    queryKey: keys.flame(hostId, [rangeKey(range), filter.pid, filter.comm, filter.cpu, filter.idle]),
    queryFn: async ({ signal }) => {
      const body = await unwrap(
        api.GET("/api/v1/hosts/{host_id}/flamegraph", {
          params: { path: { host_id: hostId }, query: { ...rangeQuery(range), ...filterQuery(filter) } },
          parseAs: "arrayBuffer",
          signal,
        }),
      );
      return read(body, signal);
    },
    retry,
    enabled,
    ...stackLiveOptions(live),
  });
}

export interface FlameDiffQuery {
  a: { from: string; to: string };
  b: { from: string; to: string };
  bHost: string | null;
  filter: StackFilter;
}

export function useFlameDiff(hostId: string, q: FlameDiffQuery | null) {
  return useQuery<FlameDiffData, Error>({
    queryKey: keys.flameDiff(hostId, [q]),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/flamegraph/diff", {
          params: {
            path: { host_id: hostId },
            query: { a_from: q!.a.from, a_to: q!.a.to, b_from: q!.b.from, b_to: q!.b.to, b_host: q!.bHost ?? undefined,
                     ...filterQuery(q!.filter) },
          },
        }),
      ),
    retry,
    enabled: q !== null,
    staleTime: Infinity,
  });
}

export function useFunctionCalls(hostId: string, fid: number, range: TimeRange, live: boolean, filter: StackFilter, enabled = true) {
  return useQuery<FunctionCalls, Error>({
    queryKey: keys.calls(hostId, fid, [rangeKey(range), filter.pid, filter.comm, filter.cpu, filter.idle]),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/functions/{function_id}/calls", {
          params: { path: { host_id: hostId, function_id: fid }, query: { ...rangeQuery(range), ...filterQuery(filter) } },
        }),
      ),
    retry,
    enabled,
    ...stackLiveOptions(live),
  });
}

export function useInstructionSamples(hostId: string, fid: number, range: TimeRange, live: boolean, enabled = true) {
  return useQuery<InstructionSamples, Error>({
    queryKey: keys.insnSamples(hostId, fid, rangeKey(range)),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/functions/{function_id}/instruction-samples", {
          params: { path: { host_id: hostId, function_id: fid }, query: rangeQuery(range) },
        }),
      ),
    retry,
    enabled,
    ...liveOptions(live),
  });
}

/** Data coverage and recorded gaps of a host's recent period, for the gaps strip. */
export function useDataCoverage(hostId: string, windowS: number, buckets = 120) {
  return useQuery<DataCoverage, Error>({
    queryKey: keys.coverage(hostId, windowS),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/coverage", {
          params: { path: { host_id: hostId }, query: { window_s: windowS, buckets } },
        }),
      ),
    retry,
    placeholderData: keepPreviousData,
    refetchInterval: 10_000,
  });
}

export function useEnrolmentTokens(enabled = true) {
  return useQuery<EnrolmentToken[], Error>({
    queryKey: keys.enrolmentTokens,
    queryFn: () => unwrap(api.GET("/api/v1/enrolment-tokens")),
    retry,
    enabled,
  });
}

export function useEnrolmentRequests(enabled = true) {
  return useQuery<EnrolmentRequest[], Error>({
    queryKey: keys.enrolmentRequests,
    queryFn: () => unwrap(api.GET("/api/v1/enrolment-requests")),
    retry,
    enabled,
    refetchInterval: 5000,
  });
}

export function useCreateEnrolmentToken() {
  const qc = useQueryClient();
  return useMutation<EnrolmentTokenCreated, Error, { note: string; hours: number; host_id?: string | null }>({
    mutationFn: (body) => unwrap(api.POST("/api/v1/enrolment-tokens", { body })),
    onSuccess: () => void qc.invalidateQueries({ queryKey: keys.enrolmentTokens }),
  });
}

export function useRevokeEnrolmentToken() {
  const qc = useQueryClient();
  return useMutation<unknown, Error, string>({
    mutationFn: (id) => unwrap(api.DELETE("/api/v1/enrolment-tokens/{token_id}", { params: { path: { token_id: id } } })),
    onSuccess: () => void qc.invalidateQueries({ queryKey: keys.enrolmentTokens }),
  });
}

export function useDecideEnrolment() {
  const qc = useQueryClient();
  return useMutation<EnrolmentRequest, Error, { requestId: string; approve: boolean }>({
    mutationFn: ({ requestId, approve }) => {
      const params = { path: { request_id: requestId } };
      return unwrap(
        approve
          ? api.POST("/api/v1/enrolment-requests/{request_id}/approve", { params })
          : api.POST("/api/v1/enrolment-requests/{request_id}/reject", { params }),
      );
    },
    onSettled: () => void qc.invalidateQueries({ queryKey: keys.enrolmentRequests }),
  });
}

/** Reject the listed pending requests, or all of them (`null`). */
export function useRejectEnrolments() {
  const qc = useQueryClient();
  return useMutation<{ rejected: number }, Error, string[] | null>({
    mutationFn: (ids) =>
      unwrap(api.POST("/api/v1/enrolment-requests/reject", {
        body: ids === null ? { all_pending: true } : { request_ids: ids, all_pending: false },
      })),
    onSettled: () => void qc.invalidateQueries({ queryKey: keys.enrolmentRequests }),
  });
}

export function useUsers(enabled = true) {
  return useQuery<UserDetail[], Error>({
    queryKey: keys.users,
    queryFn: () => unwrap(api.GET("/api/v1/users")),
    retry,
    enabled,
  });
}

export function useCreateUser() {
  const qc = useQueryClient();
  return useMutation<UserDetail, Error, UserCreate>({
    mutationFn: (body) => unwrap(api.POST("/api/v1/users", { body })),
    onSuccess: () => void qc.invalidateQueries({ queryKey: keys.users }),
  });
}

/** Change a user's role, or disable or enable the user. */
export function useUpdateUser() {
  const qc = useQueryClient();
  return useMutation<UserDetail, Error, { userId: string; change: UserUpdate }>({
    mutationFn: ({ userId, change }) =>
      unwrap(api.PATCH("/api/v1/users/{user_id}", { params: { path: { user_id: userId } }, body: change })),
    onSettled: () => void qc.invalidateQueries({ queryKey: keys.users }),
  });
}

export function useResetPassword() {
  return useMutation<unknown, Error, { userId: string; password: string }>({
    mutationFn: ({ userId, password }) =>
      unwrap(api.POST("/api/v1/users/{user_id}/password", { params: { path: { user_id: userId } }, body: { password } })),
  });
}

/** Retire (the certificate stops working, data stays) or delete (host and its data go) a host. */
export function useHostAction() {
  const qc = useQueryClient();
  return useMutation<unknown, Error, { hostId: string; action: "retire" | "delete" }>({
    mutationFn: ({ hostId, action }) =>
      unwrap(
        action === "retire"
          ? api.POST("/api/v1/hosts/{host_id}/retire", { params: { path: { host_id: hostId } } })
          : api.DELETE("/api/v1/hosts/{host_id}", { params: { path: { host_id: hostId } } }),
      ),
    onSuccess: (_data, { hostId }) => {
      void qc.invalidateQueries({ queryKey: keys.hosts });
      void qc.invalidateQueries({ queryKey: keys.host(hostId) });
    },
  });
}

// Plans ------------------------------------------------------------------------------------------


export function usePlans(hostId: string, functionIndex: { digest?: string; index?: number } = {}) {
  return useQuery<Plan[], Error>({
    queryKey: [...keys.plans(hostId), functionIndex.digest ?? "", functionIndex.index ?? -1],
    queryFn: () => unwrap(api.GET("/api/v1/hosts/{host_id}/plans", {
      params: { path: { host_id: hostId }, query: { digest: functionIndex.digest, function_index: functionIndex.index } },
    })),
    retry,
    refetchInterval: 5000,
  });
}

/** The host's installed plans (of one target, or all), with their group's functions: the console marks
 *  those functions as running an installed copy. */
export function useInstalledPlans(hostId: string, target?: string) {
  return useQuery<Plan[], Error>({
    queryKey: [...keys.plans(hostId), "installed", target ?? ""],
    queryFn: () => unwrap(api.GET("/api/v1/hosts/{host_id}/plans", {
      params: { path: { host_id: hostId }, query: { state: ["installed"], target, limit: 1000 } },
    })),
    retry: false,
    refetchInterval: 10000,
  });
}

/** One plan; polled as `refreshMs` says from the plan as it stands (the plans feature polls while the
 *  agent works on it — planning, installing, reverting — and while its before/after windows fill). */
export function usePlan(hostId: string, planId: string, enabled: boolean, refreshMs: (p: PlanDetail | undefined) => number | false) {
  return useQuery<PlanDetail, Error>({
    enabled,
    queryKey: keys.plan(hostId, planId),
    queryFn: () => unwrap(api.GET("/api/v1/hosts/{host_id}/plans/{plan_id}", {
      params: { path: { host_id: hostId, plan_id: planId } },
    })),
    retry,
    refetchInterval: (q) => refreshMs(q.state.data),
  });
}

export function usePlanAudit(hostId: string, planId: string, version: string) {
  return useQuery<PlanAuditEntry[], Error>({
    queryKey: [...keys.plan(hostId, planId), "audit", version],
    queryFn: () => unwrap(api.GET("/api/v1/hosts/{host_id}/plans/{plan_id}/audit", {
      params: { path: { host_id: hostId, plan_id: planId } },
    })),
    retry,
  });
}

/** A command as it stands (the live channel replaces it on every change); no id, no query. */
export const commandQuery = (hostId: string, commandId: string | null | undefined) =>
  queryOptions<Command, Error>({
    queryKey: keys.command(hostId, commandId ?? ""),
    queryFn: () => unwrap(api.GET("/api/v1/hosts/{host_id}/commands/{command_id}", {
      params: { path: { host_id: hostId, command_id: commandId ?? "" } },
    })),
    enabled: !!commandId,
  });

/** A command polled every second while `poll` holds (the plan page's make command). */
export function useCommand(hostId: string, commandId: string | null | undefined, poll: boolean) {
  return useQuery({ ...commandQuery(hostId, commandId), retry, refetchInterval: poll ? 1000 : false });
}

/** The console's id of a plan group's member: the function of that name at that address in the target
 *  (the first of that name when none is at that address). */
export function useFunctionIdAt(hostId: string, target: string, m: { fn: string; address: string }, enabled: boolean) {
  return useQuery<number | null, Error>({
    queryKey: ["host", hostId, "plan-member", target, m.fn, m.address],
    queryFn: async () => {
      const page = await unwrap(api.GET("/api/v1/hosts/{host_id}/functions", {
        params: { path: { host_id: hostId }, query: { q: m.fn, target, limit: 50 } },
      }));
      const named = page.items.filter((f) => f.name === m.fn);
      const at = named.find((f) => strip0x(f.address_hex) === strip0x(m.address));
      return (at ?? named[0])?.id ?? null;
    },
    enabled,
    staleTime: Infinity,
  });
}

const strip0x = (s: string) => s.replace(/^0x/i, "").replace(/^0+(?=.)/, "").toLowerCase();

export function useMakePlan(hostId: string) {
  const qc = useQueryClient();
  return useMutation<Plan, Error, { target: string; function_id: number; seconds?: number }>({
    mutationFn: (body) => unwrap(api.POST("/api/v1/hosts/{host_id}/plans", {
      params: { path: { host_id: hostId } },
      body: { seconds: 0, join_fraction: 0, stall_threshold: 0, max_functions: 0, ...body },
    })),
    onSuccess: () => qc.invalidateQueries({ queryKey: keys.plans(hostId) }),
  });
}

export type PlanStep = "request" | "approve" | "reject" | "install" | "revert";

export function usePlanStep(hostId: string, planId: string) {
  const qc = useQueryClient();
  return useMutation<PlanDetail, Error, { step: PlanStep; reason?: string; window_s?: number }>({
    mutationFn: ({ step, reason, window_s }) => {
      const params = { path: { host_id: hostId, plan_id: planId } };
      switch (step) {
        case "request": return unwrap(api.POST("/api/v1/hosts/{host_id}/plans/{plan_id}/request", { params }));
        case "approve": return unwrap(api.POST("/api/v1/hosts/{host_id}/plans/{plan_id}/approve", { params }));
        case "reject": return unwrap(api.POST("/api/v1/hosts/{host_id}/plans/{plan_id}/reject", { params, body: { reason: reason ?? "" } }));
        case "install": return unwrap(api.POST("/api/v1/hosts/{host_id}/plans/{plan_id}/install", { params, body: { window_s: window_s ?? 5 } }));
        case "revert": return unwrap(api.POST("/api/v1/hosts/{host_id}/plans/{plan_id}/revert", { params }));
      }
    },
    onSuccess: (p) => {
      qc.setQueryData(keys.plan(hostId, planId), p);
      void qc.invalidateQueries({ queryKey: keys.plan(hostId, planId) });
    },
  });
}
