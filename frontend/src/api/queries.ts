// SPDX-License-Identifier: Apache-2.0
// Server state for every screen, as TanStack Query hooks over the typed client. Query keys start
// with the host id so a live update for one host refreshes only that host's views. Every query is a
// `queryOptions` factory (`…Query`: key, fetch and freshness), and its hook (`use…`) adds only the
// view's retry and enabled choices; views that ask for many at once use the factory with useQueries.
// Keys come only from `keys` (the factories' keys and the prefixes that invalidations name).
import {
  keepPreviousData,
  queryOptions,
  useMutation,
  useQueries,
  useQuery,
  useQueryClient,
} from "@tanstack/react-query";
import { api, ApiError, unwrap } from "./client";
import type {
  Comparison,
  DataCoverage,
  EnrolmentRequest,
  EnrolmentToken,
  EnrolmentTokenCreated,
  FlameDiffData,
  FunctionCalls,
  FunctionDetail,
  FunctionSamples,
  Host,
  Hotness,
  InstructionSamples,
  Instructions,
  LayoutCandidates,
  Module,
  Timeline,
  TopFunctions,
  User,
  UserCreate,
  UserDetail,
  UserUpdate,
  Plan,
  PlanDetail,
  PlanAuditEntry,
  Command,
} from "./types";
import { rangeKey, rangeQuery, type TimeRange } from "../lib/timeRange";

export const keys = {
  me: ["me"] as const,
  hosts: ["hosts"] as const,
  host: (hostId: string) => ["host", hostId] as const,
  // Prefixes of one host's queries of a kind (each key of that kind starts so), for invalidations.
  topAll: (hostId: string) => ["host", hostId, "top"] as const,
  hotnessAll: (hostId: string) => ["host", hostId, "hotness"] as const,
  samplesAll: (hostId: string) => ["host", hostId, "samples"] as const,
  timelineAll: (hostId: string) => ["host", hostId, "timeline"] as const,
  coverageAll: (hostId: string) => ["host", hostId, "coverage"] as const,
  modules: (hostId: string) => ["host", hostId, "modules"] as const,
  catalog: (digest: string) => ["catalog", digest] as const,
  fn: (hostId: string, fid: number, target = "kernel") => ["host", hostId, "function", fid, target] as const,
  instructions: (hostId: string, fid: number, target = "kernel") =>
    ["host", hostId, "function", fid, target, "instructions"] as const,
  samples: (hostId: string, fid: number, range: string) => ["host", hostId, "samples", fid, range] as const,
  top: (hostId: string, range: string, rest: unknown[] = []) => ["host", hostId, "top", range, ...rest] as const,
  hotness: (hostId: string, range: string) => ["host", hostId, "hotness", range] as const,
  // Under "top": live sample pushes refresh the ranking with the top functions.
  layout: (hostId: string, target: string, range: string) => ["host", hostId, "top", "layout", target, range] as const,
  timeline: (hostId: string, range: string) => ["host", hostId, "timeline", range] as const,
  compare: (hostId: string, rest: unknown[]) => ["host", hostId, "compare", ...rest] as const,
  coverage: (hostId: string, windowS: number) => ["host", hostId, "coverage", windowS] as const,
  flame: (hostId: string, rest: unknown[]) => ["host", hostId, "flame", ...rest] as const,
  flameDiff: (hostId: string, rest: unknown[]) => ["host", hostId, "flame-diff", ...rest] as const,
  calls: (hostId: string, fid: number, rest: unknown[]) => ["host", hostId, "calls", fid, ...rest] as const,
  // Under "samples", so live pushes refresh it with the function's block samples.
  insnSamples: (hostId: string, fid: number, range: string) =>
    ["host", hostId, "samples", fid, "instructions", range] as const,
  plans: (hostId: string) => ["host", hostId, "plans"] as const,
  planList: (hostId: string, digest: string, index: number) => ["host", hostId, "plans", digest, index] as const,
  installedPlans: (hostId: string, target: string) => ["host", hostId, "plans", "installed", target] as const,
  plan: (hostId: string, planId: string) => ["host", hostId, "plan", planId] as const,
  planBody: (hostId: string, planId: string, etag: string) => ["plan-body", hostId, planId, etag] as const,
  planAudit: (hostId: string, planId: string, version: string) =>
    ["host", hostId, "plan", planId, "audit", version] as const,
  planMember: (hostId: string, target: string, fn: string, address: string) =>
    ["host", hostId, "plan-member", target, fn, address] as const,
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
export function retry(count: number, error: unknown): boolean {
  if (error instanceof ApiError && error.status >= 400 && error.status < 500) return false;
  return count < 2;
}

/** Fallback refresh for live views, in case the WebSocket is down; pushes refresh sooner. */
const LIVE_FALLBACK_MS = 5000;

export const meQuery = () =>
  queryOptions<User, Error>({
    queryKey: keys.me,
    queryFn: () => unwrap(api.GET("/api/v1/auth/me")),
    staleTime: 60_000,
  });

export function useMe(enabled: boolean) {
  return useQuery({ ...meQuery(), enabled, retry });
}

export const hostsQuery = () =>
  queryOptions<Host[], Error>({
    queryKey: keys.hosts,
    queryFn: () => unwrap(api.GET("/api/v1/hosts")),
    refetchInterval: 10_000,
  });

export function useHosts() {
  return useQuery({ ...hostsQuery(), retry });
}

export const hostQuery = (hostId: string) =>
  queryOptions<Host, Error>({
    queryKey: keys.host(hostId),
    queryFn: () => unwrap(api.GET("/api/v1/hosts/{host_id}", { params: { path: { host_id: hostId } } })),
    refetchInterval: 10_000,
  });

export function useHost(hostId: string) {
  return useQuery({ ...hostQuery(hostId), retry });
}

export const modulesQuery = (hostId: string) =>
  queryOptions<Module[], Error>({
    queryKey: keys.modules(hostId),
    queryFn: () => unwrap(api.GET("/api/v1/hosts/{host_id}/modules", { params: { path: { host_id: hostId } } })),
    staleTime: 60_000,
  });

export function useModules(hostId: string, enabled = true) {
  return useQuery({ ...modulesQuery(hostId), retry, enabled });
}

/** A host's catalog: its modules, then each complete module's content-addressed piece. The pieces
 *  never change, so they are kept for the session and the browser caches them for good. */
export function useCatalogPieces(hostId: string) {
  const modules = useModules(hostId);
  const complete = (modules.data ?? []).filter((m) => m.complete);
  const pieces = useQueries({ queries: complete.map((m) => ({ ...catalogPieceQuery(m.digest), retry })) });
  return { modules, complete, pieces };
}

/** One module's content-addressed catalog piece: it never changes, so it is kept for the session. */
export const catalogPieceQuery = (digest: string) =>
  queryOptions({
    queryKey: keys.catalog(digest),
    queryFn: () => unwrap(api.GET("/api/v1/catalogs/{digest}", { params: { path: { digest } } })),
    staleTime: Infinity,
    gcTime: Infinity,
  });

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

export const instructionsQuery = (hostId: string, fid: number, target = "kernel") =>
  queryOptions<Instructions, Error>({
    queryKey: keys.instructions(hostId, fid, target),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/functions/{function_id}/instructions", {
          params: { path: { host_id: hostId, function_id: fid }, query: { target } },
        }),
      ),
    // The instructions are the build's (the backend caches them), but where a measurement's probe sits
    // is live: a panel opened again, or the window refocused, after 5 s asks again (served from the cache).
    staleTime: 5_000,
  });

export function useInstructions(hostId: string, fid: number, enabled: boolean, target = "kernel") {
  // 502/503/504 carry a reason the panel shows; retrying an offline host only delays it.
  return useQuery({ ...instructionsQuery(hostId, fid, target), retry: false, enabled });
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

export const topFunctionsQuery = (hostId: string, range: TimeRange, live: boolean, q: TopQuery) =>
  queryOptions<TopFunctions, Error>({
    queryKey: keys.top(hostId, rangeKey(range), [q.limit, q.offset, q.sort, q.desc, q.includeIdle]),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/top-functions", {
          params: {
            path: { host_id: hostId },
            query: {
              ...rangeQuery(range),
              limit: q.limit,
              offset: q.offset,
              sort: q.sort,
              order: q.desc ? "desc" : "asc",
              include_idle: q.includeIdle,
            },
          },
        }),
      ),
    ...liveOptions(live),
  });

export function useTopFunctions(hostId: string, range: TimeRange, live: boolean, q: TopQuery) {
  return useQuery({ ...topFunctionsQuery(hostId, range, live, q), retry });
}

export const layoutCandidatesQuery = (hostId: string, target: string, range: TimeRange, live: boolean) =>
  queryOptions<LayoutCandidates, Error>({
    queryKey: keys.layout(hostId, target, rangeKey(range)),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/targets/{target_id}/layout-candidates", {
          params: { path: { host_id: hostId, target_id: target }, query: rangeQuery(range) },
        }),
      ),
    ...liveOptions(live),
  });

export function useLayoutCandidates(hostId: string, target: string, range: TimeRange, live: boolean) {
  return useQuery({ ...layoutCandidatesQuery(hostId, target, range, live), retry });
}

export const hotnessQuery = (hostId: string, range: TimeRange, live: boolean) =>
  queryOptions<Hotness, Error>({
    queryKey: keys.hotness(hostId, rangeKey(range)),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/hotness", {
          params: { path: { host_id: hostId }, query: rangeQuery(range) },
        }),
      ),
    ...liveOptions(live),
  });

export function useHotness(hostId: string, range: TimeRange, live: boolean, enabled = true) {
  return useQuery({ ...hotnessQuery(hostId, range, live), retry, enabled });
}

export const timelineQuery = (hostId: string, range: TimeRange, live: boolean, points = 240) =>
  queryOptions<Timeline, Error>({
    queryKey: keys.timeline(hostId, rangeKey(range)),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/timeline", {
          params: { path: { host_id: hostId }, query: { ...rangeQuery(range), points } },
        }),
      ),
    ...liveOptions(live),
  });

export function useTimeline(hostId: string, range: TimeRange, live: boolean, points = 240) {
  return useQuery({ ...timelineQuery(hostId, range, live, points), retry });
}

/** A comparison's two absolute ranges: A on the host in the path, B on it or on `bHost`. */
export interface TwoRanges {
  a: { from: string; to: string };
  b: { from: string; to: string };
  bHost: string | null;
}

/** The query parameters of two ranges, as /compare and /flamegraph/diff take them. */
const twoRangesQuery = (q: TwoRanges) => ({
  a_from: q.a.from,
  a_to: q.a.to,
  b_from: q.b.from,
  b_to: q.b.to,
  b_host: q.bHost ?? undefined,
});

export interface CompareQuery extends TwoRanges {
  includeIdle: boolean;
  limit: number;
}

export const compareQuery = (hostId: string, q: CompareQuery | null) =>
  queryOptions<Comparison, Error>({
    queryKey: keys.compare(hostId, [q]),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/compare", {
          params: {
            path: { host_id: hostId },
            query: {
              ...twoRangesQuery(q!),
              include_idle: q!.includeIdle,
              limit: q!.limit,
            },
          },
        }),
      ),
    enabled: q !== null,
    staleTime: Infinity,
  });

export function useCompare(hostId: string, q: CompareQuery | null) {
  return useQuery({ ...compareQuery(hostId, q), retry });
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

/** The flame graph by stack id (/flamegraph/stacks), its reply's bytes unparsed and handed to `read` (the
 *  flame feature parses them in a worker and asks, through `definitions`, for the frames of the stacks it
 *  has not seen), whose result is cached. */
export interface FlameStacksSource {
  hostId: string;
  definitions: (ids: string[], signal?: AbortSignal) => Promise<ArrayBuffer>;
  signal: AbortSignal;
}

export const flameGraphQuery = <T>(
  hostId: string,
  range: TimeRange,
  live: boolean,
  filter: StackFilter,
  read: (body: ArrayBuffer, src: FlameStacksSource) => Promise<T>,
  /** Whether to ask for every stack's frames in the same reply (the reader keeps none of the host's). */
  withDefinitions: (hostId: string) => boolean = () => false,
) =>
  queryOptions<T, Error>({
    queryKey: keys.flame(hostId, [rangeKey(range), filter.pid, filter.comm, filter.cpu, filter.idle]),
    queryFn: async ({ signal }) => {
      const path = { host_id: hostId };
      const body = await unwrap(
        api.GET("/api/v1/hosts/{host_id}/flamegraph/stacks", {
          params: {
            path,
            query: { ...rangeQuery(range), ...filterQuery(filter), definitions: withDefinitions(hostId) || undefined },
          },
          parseAs: "arrayBuffer",
          signal,
        }),
      );
      const definitions = (ids: string[], s?: AbortSignal) =>
        unwrap(
          api.POST("/api/v1/hosts/{host_id}/flamegraph/definitions", {
            params: { path },
            body: { ids },
            parseAs: "arrayBuffer",
            signal: s,
          }),
        );
      return read(body, { hostId, definitions, signal });
    },
    ...stackLiveOptions(live),
  });

export function useFlameGraph<T>(
  hostId: string,
  range: TimeRange,
  live: boolean,
  filter: StackFilter,
  read: (body: ArrayBuffer, src: FlameStacksSource) => Promise<T>,
  enabled = true,
  withDefinitions?: (hostId: string) => boolean,
) {
  return useQuery({ ...flameGraphQuery(hostId, range, live, filter, read, withDefinitions), retry, enabled });
}

export interface FlameDiffQuery extends TwoRanges {
  filter: StackFilter;
}

export const flameDiffQuery = (hostId: string, q: FlameDiffQuery | null) =>
  queryOptions<FlameDiffData, Error>({
    queryKey: keys.flameDiff(hostId, [q]),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/flamegraph/diff", {
          params: {
            path: { host_id: hostId },
            query: {
              ...twoRangesQuery(q!),
              ...filterQuery(q!.filter),
            },
          },
        }),
      ),
    enabled: q !== null,
    staleTime: Infinity,
  });

export function useFlameDiff(hostId: string, q: FlameDiffQuery | null) {
  return useQuery({ ...flameDiffQuery(hostId, q), retry });
}

export const functionCallsQuery = (hostId: string, fid: number, range: TimeRange, live: boolean, filter: StackFilter) =>
  queryOptions<FunctionCalls, Error>({
    queryKey: keys.calls(hostId, fid, [rangeKey(range), filter.pid, filter.comm, filter.cpu, filter.idle]),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/functions/{function_id}/calls", {
          params: {
            path: { host_id: hostId, function_id: fid },
            query: { ...rangeQuery(range), ...filterQuery(filter) },
          },
        }),
      ),
    ...stackLiveOptions(live),
  });

export function useFunctionCalls(
  hostId: string,
  fid: number,
  range: TimeRange,
  live: boolean,
  filter: StackFilter,
  enabled = true,
) {
  return useQuery({ ...functionCallsQuery(hostId, fid, range, live, filter), retry, enabled });
}

export const instructionSamplesQuery = (hostId: string, fid: number, range: TimeRange, live: boolean) =>
  queryOptions<InstructionSamples, Error>({
    queryKey: keys.insnSamples(hostId, fid, rangeKey(range)),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/functions/{function_id}/instruction-samples", {
          params: { path: { host_id: hostId, function_id: fid }, query: rangeQuery(range) },
        }),
      ),
    ...liveOptions(live),
  });

export function useInstructionSamples(hostId: string, fid: number, range: TimeRange, live: boolean, enabled = true) {
  return useQuery({ ...instructionSamplesQuery(hostId, fid, range, live), retry, enabled });
}

/** Data coverage and recorded gaps of a host's recent period, for the gaps strip. */
export const dataCoverageQuery = (hostId: string, windowS: number, buckets = 120) =>
  queryOptions<DataCoverage, Error>({
    queryKey: keys.coverage(hostId, windowS),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/coverage", {
          params: { path: { host_id: hostId }, query: { window_s: windowS, buckets } },
        }),
      ),
    placeholderData: keepPreviousData,
    refetchInterval: 10_000,
  });

export function useDataCoverage(hostId: string, windowS: number, buckets = 120) {
  return useQuery({ ...dataCoverageQuery(hostId, windowS, buckets), retry });
}

export const enrolmentTokensQuery = () =>
  queryOptions<EnrolmentToken[], Error>({
    queryKey: keys.enrolmentTokens,
    queryFn: () => unwrap(api.GET("/api/v1/enrolment-tokens")),
  });

export function useEnrolmentTokens(enabled = true) {
  return useQuery({ ...enrolmentTokensQuery(), retry, enabled });
}

export const enrolmentRequestsQuery = () =>
  queryOptions<EnrolmentRequest[], Error>({
    queryKey: keys.enrolmentRequests,
    queryFn: () => unwrap(api.GET("/api/v1/enrolment-requests")),
    refetchInterval: 5000,
  });

export function useEnrolmentRequests(enabled = true) {
  return useQuery({ ...enrolmentRequestsQuery(), retry, enabled });
}

export function useCreateEnrolmentToken() {
  const qc = useQueryClient();
  return useMutation<EnrolmentTokenCreated, Error, { note: string; hours: number; host_id?: string | null }>({
    mutationFn: (body) => unwrap(api.POST("/api/v1/enrolment-tokens", { body })),
    onSuccess: () => void qc.invalidateQueries({ queryKey: enrolmentTokensQuery().queryKey }),
  });
}

export function useRevokeEnrolmentToken() {
  const qc = useQueryClient();
  return useMutation<unknown, Error, string>({
    mutationFn: (id) =>
      unwrap(api.DELETE("/api/v1/enrolment-tokens/{token_id}", { params: { path: { token_id: id } } })),
    onSuccess: () => void qc.invalidateQueries({ queryKey: enrolmentTokensQuery().queryKey }),
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
    onSettled: () => void qc.invalidateQueries({ queryKey: enrolmentRequestsQuery().queryKey }),
  });
}

/** Reject the listed pending requests, or all of them (`null`). */
export function useRejectEnrolments() {
  const qc = useQueryClient();
  return useMutation<{ rejected: number }, Error, string[] | null>({
    mutationFn: (ids) =>
      unwrap(
        api.POST("/api/v1/enrolment-requests/reject", {
          body: ids === null ? { all_pending: true } : { request_ids: ids, all_pending: false },
        }),
      ),
    onSettled: () => void qc.invalidateQueries({ queryKey: enrolmentRequestsQuery().queryKey }),
  });
}

export const usersQuery = () =>
  queryOptions<UserDetail[], Error>({
    queryKey: keys.users,
    queryFn: () => unwrap(api.GET("/api/v1/users")),
  });

export function useUsers(enabled = true) {
  return useQuery({ ...usersQuery(), retry, enabled });
}

export function useCreateUser() {
  const qc = useQueryClient();
  return useMutation<UserDetail, Error, UserCreate>({
    mutationFn: (body) => unwrap(api.POST("/api/v1/users", { body })),
    onSuccess: () => void qc.invalidateQueries({ queryKey: usersQuery().queryKey }),
  });
}

/** Change a user's role, or disable or enable the user. */
export function useUpdateUser() {
  const qc = useQueryClient();
  return useMutation<UserDetail, Error, { userId: string; change: UserUpdate }>({
    mutationFn: ({ userId, change }) =>
      unwrap(api.PATCH("/api/v1/users/{user_id}", { params: { path: { user_id: userId } }, body: change })),
    onSettled: () => void qc.invalidateQueries({ queryKey: usersQuery().queryKey }),
  });
}

export function useResetPassword() {
  return useMutation<unknown, Error, { userId: string; password: string }>({
    mutationFn: ({ userId, password }) =>
      unwrap(
        api.POST("/api/v1/users/{user_id}/password", { params: { path: { user_id: userId } }, body: { password } }),
      ),
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
      void qc.invalidateQueries({ queryKey: hostsQuery().queryKey });
      void qc.invalidateQueries({ queryKey: hostQuery(hostId).queryKey });
    },
  });
}

// Plans ------------------------------------------------------------------------------------------

export const plansQuery = (hostId: string, functionIndex: { digest?: string; index?: number } = {}) =>
  queryOptions<Plan[], Error>({
    queryKey: keys.planList(hostId, functionIndex.digest ?? "", functionIndex.index ?? -1),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/plans", {
          params: {
            path: { host_id: hostId },
            query: { digest: functionIndex.digest, function_index: functionIndex.index },
          },
        }),
      ),
    refetchInterval: 5000,
  });

export function usePlans(hostId: string, functionIndex: { digest?: string; index?: number } = {}) {
  return useQuery({ ...plansQuery(hostId, functionIndex), retry });
}

/** The host's installed plans (of one target, or all), with their group's functions: the console marks
 *  those functions as running an installed copy. */
export const installedPlansQuery = (hostId: string, target?: string) =>
  queryOptions<Plan[], Error>({
    queryKey: keys.installedPlans(hostId, target ?? ""),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/plans", {
          params: { path: { host_id: hostId }, query: { state: ["installed"], target, limit: 1000 } },
        }),
      ),
    refetchInterval: 10000,
  });

export function useInstalledPlans(hostId: string, target?: string) {
  return useQuery({ ...installedPlansQuery(hostId, target), retry: false });
}

/** One plan; polled as `refreshMs` says from the plan as it stands (the plans feature polls while the
 *  agent works on it — planning, installing, reverting — and while its before/after windows fill). */
export const planQuery = (hostId: string, planId: string) =>
  queryOptions<PlanDetail, Error>({
    queryKey: keys.plan(hostId, planId),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/plans/{plan_id}", {
          params: { path: { host_id: hostId, plan_id: planId } },
        }),
      ),
  });

export function usePlan(
  hostId: string,
  planId: string,
  enabled: boolean,
  refreshMs: (p: PlanDetail | undefined) => number | false,
) {
  return useQuery({ ...planQuery(hostId, planId), enabled, retry, refetchInterval: (q) => refreshMs(q.state.data) });
}

/** A plan's body (the agent's plan, up to 16 MiB), as bytes: read once per plan and body version (the
 *  record's `body_etag`; it never changes once stored), never polled, and parsed off the main thread by
 *  the page's worker (usePlanView). */
export const planBodyQuery = (hostId: string, planId: string, etag: string) =>
  queryOptions<ArrayBuffer, Error>({
    queryKey: keys.planBody(hostId, planId, etag),
    queryFn: () =>
      unwrap<ArrayBuffer>(
        api.GET("/api/v1/hosts/{host_id}/plans/{plan_id}/body", {
          params: { path: { host_id: hostId, plan_id: planId } },
          parseAs: "arrayBuffer",
        }),
      ),
    staleTime: Infinity,
  });

export function usePlanBody(hostId: string, planId: string, etag: string | null | undefined) {
  return useQuery({ ...planBodyQuery(hostId, planId, etag ?? ""), enabled: !!etag, retry });
}

export const planAuditQuery = (hostId: string, planId: string, version: string) =>
  queryOptions<PlanAuditEntry[], Error>({
    queryKey: keys.planAudit(hostId, planId, version),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/plans/{plan_id}/audit", {
          params: { path: { host_id: hostId, plan_id: planId } },
        }),
      ),
  });

export function usePlanAudit(hostId: string, planId: string, version: string) {
  return useQuery({ ...planAuditQuery(hostId, planId, version), retry });
}

/** A command as it stands (the live channel replaces it on every change); no id, no query. */
export const commandQuery = (hostId: string, commandId: string | null | undefined) =>
  queryOptions<Command, Error>({
    queryKey: keys.command(hostId, commandId ?? ""),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/commands/{command_id}", {
          params: { path: { host_id: hostId, command_id: commandId ?? "" } },
        }),
      ),
    enabled: !!commandId,
  });

/** A command polled every second while `poll` holds (the plan page's make command). */
export function useCommandPolledWhile(hostId: string, commandId: string | null | undefined, poll: boolean) {
  return useQuery({ ...commandQuery(hostId, commandId), retry, refetchInterval: poll ? 1000 : false });
}

/** A command polled every 2 s until it ends (done, failed or cancelled): the measure page's commands. */
export function useCommandUntilEnded(hostId: string, commandId: string | null) {
  return useQuery({
    ...commandQuery(hostId, commandId),
    refetchInterval: (q) =>
      q.state.data && ["done", "failed", "cancelled"].includes(q.state.data.state) ? false : 2000,
  });
}

/** The console's id of a plan group's member: the function of that name at that address in the target
 *  (the first of that name when none is at that address). */
export const functionIdAtQuery = (hostId: string, target: string, m: { fn: string; address: string }) =>
  queryOptions<number | null, Error>({
    queryKey: keys.planMember(hostId, target, m.fn, m.address),
    queryFn: async () => {
      const page = await unwrap(
        api.GET("/api/v1/hosts/{host_id}/functions", {
          params: { path: { host_id: hostId }, query: { q: m.fn, target, limit: 50 } },
        }),
      );
      const named = page.items.filter((f) => f.name === m.fn);
      const at = named.find((f) => strip0x(f.address_hex) === strip0x(m.address));
      return (at ?? named[0])?.id ?? null;
    },
    staleTime: Infinity,
  });

export function useFunctionIdAt(hostId: string, target: string, m: { fn: string; address: string }, enabled: boolean) {
  return useQuery({ ...functionIdAtQuery(hostId, target, m), enabled });
}

const strip0x = (s: string) =>
  s
    .replace(/^0x/i, "")
    .replace(/^0+(?=.)/, "")
    .toLowerCase();

export function useMakePlan(hostId: string) {
  const qc = useQueryClient();
  // A root (function_id), or with hot_set the target process's whole hot set (seconds of samples).
  return useMutation<Plan, Error, { target: string; function_id?: number; hot_set?: boolean; seconds?: number }>({
    mutationFn: (body) =>
      unwrap(
        api.POST("/api/v1/hosts/{host_id}/plans", {
          params: { path: { host_id: hostId } },
          body: { seconds: 0, join_fraction: 0, stall_threshold: 0, max_functions: 0, hot_set: false, ...body },
        }),
      ),
    onSuccess: () => qc.invalidateQueries({ queryKey: keys.plans(hostId) }),
  });
}

export type PlanStep = "request" | "approve" | "reject" | "install" | "revert" | "compare";

export function usePlanStep(hostId: string, planId: string) {
  const qc = useQueryClient();
  // guard: an install compares the plan with the original code right after it and reverts it if slower.
  return useMutation<PlanDetail, Error, { step: PlanStep; reason?: string; window_s?: number; guard?: boolean }>({
    mutationFn: ({ step, reason, window_s, guard }) => {
      const params = { path: { host_id: hostId, plan_id: planId } };
      switch (step) {
        case "request":
          return unwrap(api.POST("/api/v1/hosts/{host_id}/plans/{plan_id}/request", { params }));
        case "approve":
          return unwrap(api.POST("/api/v1/hosts/{host_id}/plans/{plan_id}/approve", { params }));
        case "reject":
          return unwrap(
            api.POST("/api/v1/hosts/{host_id}/plans/{plan_id}/reject", { params, body: { reason: reason ?? "" } }),
          );
        case "install":
          return unwrap(
            api.POST("/api/v1/hosts/{host_id}/plans/{plan_id}/install", {
              params,
              body: { window_s: window_s ?? 5, guard: guard ?? true, guard_pairs: 6, guard_window_seconds: 1 },
            }),
          );
        case "revert":
          return unwrap(api.POST("/api/v1/hosts/{host_id}/plans/{plan_id}/revert", { params }));
        case "compare":
          return unwrap(
            api.POST("/api/v1/hosts/{host_id}/plans/{plan_id}/compare", {
              params,
              body: { pairs: 6, window_seconds: 1 },
            }),
          );
      }
    },
    onSuccess: (p) => {
      qc.setQueryData(planQuery(hostId, planId).queryKey, p);
      // The plan and what hangs under its key (its audit).
      void qc.invalidateQueries({ queryKey: keys.plan(hostId, planId) });
    },
  });
}
