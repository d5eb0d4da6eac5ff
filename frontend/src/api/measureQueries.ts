// SPDX-License-Identifier: Apache-2.0
// Server state of targets, commands and measurements, as `queryOptions` factories (`…Query`) and their
// hooks over the typed client (see queries.ts).
// Keys start with the host id, so the live channel's target, command and measurement events refresh
// exactly these views (api/live.ts).
import { keepPreviousData, queryOptions, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "./client";
import { commandQuery } from "./queries";
import type {
  MeasurementCfg,
  Command,
  FunctionsPage,
  Measurement,
  MeasurementCreate,
  MeasurementDetail,
  MeasurementSeries,
  MeasurementValues,
  Target,
} from "./types";

export const measureKeys = {
  targets: (hostId: string) => ["host", hostId, "targets"] as const,
  measurements: (hostId: string) => ["host", hostId, "measurements"] as const,
  measurement: (hostId: string, mid: string) => ["host", hostId, "measurement", mid] as const,
  values: (hostId: string, mid: string, windowS: number) =>
    ["host", hostId, "measurement", mid, "values", windowS] as const,
  series: (hostId: string, mid: string, windowS: number, res: number[]) =>
    ["host", hostId, "measurement", mid, "series", windowS, res.join(",")] as const,
  search: (hostId: string, target: string, q: string) => ["host", hostId, "fn-search", target, q] as const,
  cfg: (hostId: string, mid: string, row: number) => ["host", hostId, "measurement", mid, "cfg", row] as const,
};

/** Fallback refresh while the WebSocket is down; pushes refresh sooner. */
const FALLBACK_MS = 5000;

export const targetsQuery = (hostId: string) =>
  queryOptions<Target[], Error>({
    queryKey: measureKeys.targets(hostId),
    queryFn: () => unwrap(api.GET("/api/v1/hosts/{host_id}/targets", { params: { path: { host_id: hostId } } })),
    refetchInterval: FALLBACK_MS,
  });

export function useTargets(hostId: string) {
  return useQuery(targetsQuery(hostId));
}

function useCommandMutation<V>(hostId: string, send: (v: V) => Promise<Command>) {
  const qc = useQueryClient();
  return useMutation<Command, Error, V>({
    mutationFn: send,
    onSuccess: (cmd) => {
      qc.setQueryData(commandQuery(hostId, cmd.id).queryKey, cmd);
      void qc.invalidateQueries({ queryKey: targetsQuery(hostId).queryKey });
      void qc.invalidateQueries({ queryKey: measurementsQuery(hostId).queryKey });
    },
  });
}

export function useAttach(hostId: string) {
  return useCommandMutation(hostId, (by: { pid?: number; command?: string }) =>
    unwrap(api.POST("/api/v1/hosts/{host_id}/targets", { params: { path: { host_id: hostId } }, body: by })),
  );
}

export function useDetach(hostId: string) {
  return useCommandMutation(hostId, (targetId: string) =>
    unwrap(
      api.DELETE("/api/v1/hosts/{host_id}/targets/{target_id}", {
        params: { path: { host_id: hostId, target_id: targetId } },
      }),
    ),
  );
}

export function useCancelCommand(hostId: string) {
  return useCommandMutation(hostId, (id: string) =>
    unwrap(
      api.POST("/api/v1/hosts/{host_id}/commands/{command_id}/cancel", {
        params: { path: { host_id: hostId, command_id: id } },
      }),
    ),
  );
}

export function useStartMeasurement(hostId: string) {
  return useCommandMutation(hostId, (body: MeasurementCreate) =>
    unwrap(api.POST("/api/v1/hosts/{host_id}/measurements", { params: { path: { host_id: hostId } }, body })),
  );
}

export function useStopMeasurement(hostId: string) {
  return useCommandMutation(hostId, (mid: string) =>
    unwrap(
      api.POST("/api/v1/hosts/{host_id}/measurements/{measurement_id}/stop", {
        params: { path: { host_id: hostId, measurement_id: mid } },
      }),
    ),
  );
}

export const measurementsQuery = (hostId: string) =>
  queryOptions<Measurement[], Error>({
    queryKey: measureKeys.measurements(hostId),
    queryFn: () => unwrap(api.GET("/api/v1/hosts/{host_id}/measurements", { params: { path: { host_id: hostId } } })),
    refetchInterval: FALLBACK_MS,
  });

export function useMeasurements(hostId: string) {
  return useQuery(measurementsQuery(hostId));
}

export const measurementQuery = (hostId: string, mid: string | null) =>
  queryOptions<MeasurementDetail, Error>({
    queryKey: measureKeys.measurement(hostId, mid ?? ""),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/measurements/{measurement_id}", {
          params: { path: { host_id: hostId, measurement_id: mid ?? "" } },
        }),
      ),
    enabled: !!mid,
    refetchInterval: FALLBACK_MS,
  });

export function useMeasurement(hostId: string, mid: string | null) {
  return useQuery(measurementQuery(hostId, mid));
}

/** The live table's numbers: sums over the last `windowS` seconds of the measurement. */
export const measurementValuesQuery = (hostId: string, mid: string | null, windowS: number, live: boolean) =>
  queryOptions<MeasurementValues, Error>({
    queryKey: measureKeys.values(hostId, mid ?? "", windowS),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/measurements/{measurement_id}/values", {
          params: { path: { host_id: hostId, measurement_id: mid ?? "" }, query: { window_s: windowS } },
        }),
      ),
    enabled: !!mid,
    placeholderData: keepPreviousData,
    refetchInterval: live ? FALLBACK_MS : false,
    staleTime: live ? 0 : Infinity,
    meta: { live },
  });

export function useMeasurementValues(hostId: string, mid: string | null, windowS: number, live: boolean) {
  return useQuery(measurementValuesQuery(hostId, mid, windowS, live));
}

export const measurementSeriesQuery = (
  hostId: string,
  mid: string | null,
  windowS: number,
  resources: number[],
  live: boolean,
) =>
  queryOptions<MeasurementSeries, Error>({
    queryKey: measureKeys.series(hostId, mid ?? "", windowS, resources),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/measurements/{measurement_id}/series", {
          params: {
            path: { host_id: hostId, measurement_id: mid ?? "" },
            query: { window_s: windowS, resources: resources.join(","), points: 120 },
          },
        }),
      ),
    enabled: !!mid && resources.length > 0,
    placeholderData: keepPreviousData,
    refetchInterval: live ? FALLBACK_MS : false,
    staleTime: live ? 0 : Infinity,
    meta: { live },
  });

export function useMeasurementSeries(
  hostId: string,
  mid: string | null,
  windowS: number,
  resources: number[],
  live: boolean,
) {
  return useQuery(measurementSeriesQuery(hostId, mid, windowS, resources, live));
}

export const functionSearchQuery = (hostId: string, target: string, q: string) =>
  queryOptions<FunctionsPage, Error>({
    queryKey: measureKeys.search(hostId, target, q),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/functions", {
          params: { path: { host_id: hostId }, query: { q, target, limit: 50 } },
        }),
      ),
    enabled: q.length > 0,
    placeholderData: keepPreviousData,
  });

export function useFunctionSearch(hostId: string, target: string, q: string) {
  return useQuery(functionSearchQuery(hostId, target, q));
}

/** The whole day up to the measurement's newest interval: the longest range the route serves. */
export const CFG_WINDOW_S = 86400;

/** A measured function's block counts and derived edge counts (the CFG overlay). */
export const measurementCfgQuery = (hostId: string, mid: string | null, row: number | null, live: boolean) =>
  queryOptions<MeasurementCfg, Error>({
    queryKey: measureKeys.cfg(hostId, mid ?? "", row ?? -1),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/hosts/{host_id}/measurements/{measurement_id}/cfg", {
          params: {
            path: { host_id: hostId, measurement_id: mid ?? "" },
            query: { function_row: row ?? 0, window_s: CFG_WINDOW_S },
          },
        }),
      ),
    enabled: !!mid && row !== null,
    placeholderData: keepPreviousData,
    refetchInterval: live ? FALLBACK_MS : false,
    meta: { live },
  });

export function useMeasurementCfg(hostId: string, mid: string | null, row: number | null, live: boolean) {
  return useQuery(measurementCfgQuery(hostId, mid, row, live));
}
