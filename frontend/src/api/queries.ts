// SPDX-License-Identifier: Apache-2.0
// Server state for every screen, as TanStack Query hooks over the typed client. Query keys start
// with the host id so a live update for one host refreshes only that host's views.
import { keepPreviousData, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, ApiError, unwrap } from "./client";
import type {
  EnrolmentRequest, EnrolmentToken, EnrolmentTokenCreated, FunctionDetail, FunctionSamples, FunctionsPage, Host,
  Hotness, Instructions, Module, Timeline, TopFunctions, User,
} from "./types";

/** Largest page the backend serves: the whole kernel's catalog in one compact response. */
export const WHOLE_CATALOG = 100000;

export const keys = {
  me: ["me"] as const,
  hosts: ["hosts"] as const,
  host: (hostId: string) => ["host", hostId] as const,
  modules: (hostId: string) => ["host", hostId, "modules"] as const,
  catalog: (hostId: string) => ["host", hostId, "catalog"] as const,
  fn: (hostId: string, fid: number) => ["host", hostId, "function", fid] as const,
  instructions: (hostId: string, fid: number) => ["host", hostId, "function", fid, "instructions"] as const,
  samples: (hostId: string, fid: number, windowS: number) => ["host", hostId, "samples", fid, windowS] as const,
  top: (hostId: string, windowS: number) => ["host", hostId, "top", windowS] as const,
  hotness: (hostId: string, windowS: number) => ["host", hostId, "hotness", windowS] as const,
  timeline: (hostId: string, windowS: number) => ["host", hostId, "timeline", windowS] as const,
  enrolmentTokens: ["admin", "enrolment-tokens"] as const,
  enrolmentRequests: ["admin", "enrolment-requests"] as const,
};

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

/** The whole function catalog of a host, fetched once and kept: the tree filters and sorts it locally. */
export function useCatalog(hostId: string, enabled = true) {
  return useQuery<FunctionsPage, Error>({
    queryKey: keys.catalog(hostId),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/functions", {
          params: { path: { host_id: hostId }, query: { sort: "address", limit: WHOLE_CATALOG } },
        }),
      ),
    retry,
    enabled,
    staleTime: Infinity,
  });
}

export function useFunctionDetail(hostId: string, fid: number, enabled = true) {
  return useQuery<FunctionDetail, Error>({
    queryKey: keys.fn(hostId, fid),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/functions/{function_id}", {
          params: { path: { host_id: hostId, function_id: fid } },
        }),
      ),
    retry,
    enabled,
    staleTime: Infinity,
  });
}

export function useInstructions(hostId: string, fid: number, enabled: boolean) {
  return useQuery<Instructions, Error>({
    queryKey: keys.instructions(hostId, fid),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/functions/{function_id}/instructions", {
          params: { path: { host_id: hostId, function_id: fid } },
        }),
      ),
    // 502/503/504 carry a reason the panel shows; retrying an offline host only delays it.
    retry: false,
    enabled,
    staleTime: Infinity,
  });
}

export function useFunctionSamples(hostId: string, fid: number, windowS: number, enabled = true) {
  return useQuery<FunctionSamples, Error>({
    queryKey: keys.samples(hostId, fid, windowS),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/functions/{function_id}/samples", {
          params: { path: { host_id: hostId, function_id: fid }, query: { window_s: windowS } },
        }),
      ),
    retry,
    enabled,
    placeholderData: keepPreviousData,
    refetchInterval: LIVE_FALLBACK_MS,
  });
}

export function useTopFunctions(hostId: string, windowS: number, limit = 50) {
  return useQuery<TopFunctions, Error>({
    queryKey: keys.top(hostId, windowS),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/top-functions", {
          params: { path: { host_id: hostId }, query: { window_s: windowS, limit } },
        }),
      ),
    retry,
    placeholderData: keepPreviousData,
    refetchInterval: LIVE_FALLBACK_MS,
  });
}

export function useHotness(hostId: string, windowS: number, enabled = true) {
  return useQuery<Hotness, Error>({
    queryKey: keys.hotness(hostId, windowS),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/hotness", {
          params: { path: { host_id: hostId }, query: { window_s: windowS } },
        }),
      ),
    retry,
    enabled,
    placeholderData: keepPreviousData,
    refetchInterval: LIVE_FALLBACK_MS,
  });
}

/** Data coverage and recorded gaps of a host's recent period, for the time strip. */
export function useTimeline(hostId: string, windowS: number, buckets = 120) {
  return useQuery<Timeline, Error>({
    queryKey: keys.timeline(hostId, windowS),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/timeline", {
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
  return useMutation<EnrolmentRequest, Error, { hostId: string; approve: boolean }>({
    mutationFn: ({ hostId, approve }) =>
      unwrap(
        approve
          ? api.POST("/api/v1/enrolment-requests/{host_id}/approve", { params: { path: { host_id: hostId } } })
          : api.POST("/api/v1/enrolment-requests/{host_id}/reject", { params: { path: { host_id: hostId } } }),
      ),
    onSuccess: () => void qc.invalidateQueries({ queryKey: keys.enrolmentRequests }),
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
