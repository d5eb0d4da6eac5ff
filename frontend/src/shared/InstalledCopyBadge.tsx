// SPDX-License-Identifier: Apache-2.0
/** The "installed copy" badge: this function runs as part of an installed plan's group; links to the plan. */
import { Link } from "react-router-dom";
import type { Plan } from "../api/types";

export function InstalledCopyBadge({ hostId, plan }: { hostId: string; plan: Plan }) {
  const what = plan.root_name === plan.members[0] ? `the group of ${plan.root_name}` : "an installed group";
  return (
    <Link
      className="badge installed-copy"
      to={`/hosts/${encodeURIComponent(hostId)}/plans/${plan.id}`}
      title={`Runs an installed copy: ${what} (plan ${plan.id.slice(0, 8)}, installed by ${plan.install_by ?? "?"})`}
    >
      installed copy
    </Link>
  );
}
