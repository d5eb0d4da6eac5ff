// SPDX-License-Identifier: Apache-2.0
// A kernel-build group of the fleet: its hot code (features/fleet) with, beside it, the group's flame graph
// and the comparison of two sides of it (features/flame), composed here since a feature never imports
// another.
import { FleetCompareView, FleetFlameView } from "../features/flame/FleetFlameViews";
import { HotCodePage, type GroupViewProps } from "../features/fleet/HotCodePage";

const VIEWS = {
  flame: (p: GroupViewProps) => <FleetFlameView {...p} />,
  compare: (p: GroupViewProps) => <FleetCompareView {...p} />,
};

export function FleetGroupPage() {
  return <HotCodePage views={VIEWS} />;
}
