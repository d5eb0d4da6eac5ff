// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
// The query factories' keys sit under the prefixes that live pushes and mutations invalidate, so an
// invalidation by prefix reaches every query of that kind.
import { describe, expect, it } from "vitest";
import type { QueryKey } from "@tanstack/react-query";
import {
  dataCoverageQuery,
  functionSamplesQuery,
  hotnessQuery,
  installedPlansQuery,
  instructionSamplesQuery,
  keys,
  planAuditQuery,
  planQuery,
  plansQuery,
  timelineQuery,
  topFunctionsQuery,
} from "./queries";
import {
  measureKeys,
  measurementCfgQuery,
  measurementQuery,
  measurementSeriesQuery,
  measurementValuesQuery,
} from "./measureQueries";
import type { TimeRange } from "../lib/timeRange";

const under = (key: QueryKey, prefix: QueryKey) => expect(key.slice(0, prefix.length)).toEqual(prefix);

describe("query keys", () => {
  const range: TimeRange = { kind: "relative", seconds: 60 };
  const top = { limit: 50, offset: 0, sort: "samples" as const, desc: true, includeIdle: false };

  it("put the live sample views under the prefixes a samples push refreshes", () => {
    under(topFunctionsQuery("h", range, true, top).queryKey, keys.topAll("h"));
    under(hotnessQuery("h", range, true).queryKey, keys.hotnessAll("h"));
    under(functionSamplesQuery("h", 7, range, true).queryKey, keys.samplesAll("h"));
    under(instructionSamplesQuery("h", 7, range, true).queryKey, keys.samplesAll("h"));
    under(timelineQuery("h", range, true).queryKey, keys.timelineAll("h"));
    under(dataCoverageQuery("h", 3600).queryKey, keys.coverageAll("h"));
  });

  it("put a plan's and a measurement's views under the keys their pushes refresh", () => {
    under(plansQuery("h", { digest: "d", index: 3 }).queryKey, keys.plans("h"));
    under(installedPlansQuery("h", "kernel").queryKey, keys.plans("h"));
    under(planQuery("h", "p").queryKey, keys.plan("h", "p"));
    under(planAuditQuery("h", "p", "v").queryKey, keys.plan("h", "p"));
    for (const q of [
      measurementQuery("h", "m"),
      measurementValuesQuery("h", "m", 60, true),
      measurementSeriesQuery("h", "m", 60, [1, 2], true),
      measurementCfgQuery("h", "m", 0, true),
    ]) {
      under(q.queryKey, measureKeys.measurement("h", "m"));
    }
  });
});
