// SPDX-License-Identifier: Apache-2.0
// Short names for the API's schemas, taken from the types generated from the backend's OpenAPI
// document, so the rest of the console never restates the contract by hand.
import type { components } from "./schema";

type S = components["schemas"];

export type User = S["UserPublic"];
export type UserDetail = S["UserDetail"];
export type UserCreate = S["UserCreate"];
export type UserUpdate = S["UserUpdate"];
export type Role = User["role"];
export type Token = S["Token"];
export type Host = S["HostPublic"];
export type Capability = Host["capabilities"][number];
export type Module = S["ModulePublic"];
export type FunctionSummary = S["FunctionSummary"];
export type FunctionsPage = S["FunctionsPage"];
export type FunctionDetail = S["FunctionDetail"];
export type Block = FunctionDetail["blocks"][number];
export type Successor = Block["successors"][number];
export type SuccessorKind = Successor["kind"];
export type Callee = FunctionDetail["callees"][number];
export type Instructions = S["InstructionsPublic"];
export type Instruction = Instructions["instructions"][number];
export type FunctionSamples = S["FunctionSamples"];
export type BlockSamples = FunctionSamples["blocks"][number];
export type TopFunctions = S["TopFunctions"];
export type TopFunction = TopFunctions["items"][number];
export type LayoutCandidates = S["LayoutCandidates"];
export type LayoutCandidate = S["LayoutCandidate"];
export type Hotness = S["Hotness"];
export type Timeline = S["Timeline"];
export type TimelinePoint = Timeline["points"][number];
export type Comparison = S["Comparison"];
export type CompareItem = Comparison["items"][number];
export type Catalog = S["CatalogPublic"];
export type FlameGraphData = S["FlameGraph"];
export type FlameStacksData = S["FlameStacks"];
export type FlameDefinitionsData = S["FlameDefinitions"];
export type FlameDiffData = S["FlameDiff"];
export type StackContexts = S["StackContexts"];
export type FunctionCalls = S["FunctionCalls"];
export type CallPeer = S["CallPeer"];
export type InstructionSamples = S["InstructionSamples"];
export type DataCoverage = S["DataCoverage"];
export type CoverageBucket = S["CoverageBucket"];
export type Gap = S["GapPublic"];
export type EnrolmentToken = S["EnrolmentTokenPublic"];
export type EnrolmentTokenCreated = S["EnrolmentTokenCreated"];
export type EnrolmentRequest = S["EnrolmentRequestPublic"];

/** What the backend pushes over the live-update WebSocket (its schema types `type` as a plain string). */
export type LiveMessage =
  | (Omit<S["HostEvent"], "type"> & { type: "host" })
  | (Omit<S["SamplesEvent"], "type"> & { type: "samples" })
  | (Omit<S["GapEvent"], "type"> & { type: "gap" })
  | { type: "targets"; host_id: string }
  | { type: "command"; command: Command }
  | { type: "measurement"; host_id: string; measurement_id: string; interval_start: string; state: string }
  | (Omit<S["PlanEvent"], "type"> & { type: "plan" })
  | { type: "ping" };
export type Target = S["TargetPublic"];
export type Command = S["CommandPublic"];
export type Measurement = S["MeasurementPublic"];
export type MeasurementDetail = S["MeasurementDetail"];
export type MeasuredResource = S["MeasuredResourcePublic"];
export type MetricPlan = S["MetricPlanPublic"];
export type MeasurementValues = S["MeasurementValues"];
export type MeasurementSeries = S["MeasurementSeries"];
export type SlotValues = S["SlotValues"];
export type MeasurementCreate = S["MeasurementCreate"];
export type Plan = S["PlanPublic"];
export type PlanDetail = S["PlanDetail"];
/** A plan's body: the agent's plan as the backend checked it (GET .../plans/{id}/body). */
export type PlanBody = S["Plan"];
export type PlanState = Plan["state"];
export type PlanWindow = NonNullable<S["PlanComparison"]["before"]>;
export type PlanAuditEntry = S["PlanAuditEntry"];
export type PlanInterleaved = S["PlanInterleaved"];
export type Rollout = S["RolloutPublic"];
export type RolloutDetail = S["RolloutDetail"];
export type RolloutState = Rollout["state"];
export type RolloutHost = S["RolloutHost"];
export type RolloutHostState = RolloutHost["state"];
export type RolloutGuard = S["RolloutGuard"];
export type RolloutCreate = S["RolloutCreate"];
export type RolloutAuditEntry = S["RolloutAuditEntry"];
export type CompareSummary = S["CompareSummary"];
export type MeasurementCfg = S["MeasurementCfg"];
export type FleetGroups = S["FleetGroups"];
export type FleetGroup = S["FleetGroup"];
export type FleetHost = S["FleetHost"];
export type FleetHotCode = S["FleetHotCode"];
export type FleetFlameGraph = S["FleetFlameGraph"];
export type FleetFlameDiff = S["FleetFlameDiff"];
export type HotFunction = S["HotFunction"];
export type HotCodeHost = S["HotCodeHost"];
export type HotCodeCell = S["HotCodeCell"];
export type HotCodeOutlier = S["HotCodeOutlier"];
export type OutlierRule = S["OutlierRule"];
export type FleetPlans = S["FleetPlans"];
export type FleetPlan = S["FleetPlan"];
export type FleetPlanWindow = S["FleetPlanWindow"];
export type LabelsUpdate = S["LabelsUpdate"];
