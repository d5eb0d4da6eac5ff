// SPDX-License-Identifier: Apache-2.0
// A plan's page as routed: the plan (features/plans) with, below its approval workflow, its roll-outs to
// the fleet (features/rollouts: start one from an approved plan, the ones made of it, or the roll-out a
// per-host plan belongs to).
import { PlanPage } from "../features/plans/PlanPage";
import { RolloutPanel } from "../features/rollouts/RolloutPanel";

export function PlanRoute() {
  return <PlanPage afterWorkflow={(hostId, plan) => <RolloutPanel hostId={hostId} plan={plan} />} />;
}
