// SPDX-License-Identifier: Apache-2.0
// The toolbar of a kernel-build group's flame graphs (FleetFlameViews.tsx: the group's merged tree and its
// comparison): the idle task's choice, the frame search with its matches and the orientation, and whatever
// the view adds after them (the comparison's colour legend).
import type { ReactNode } from "react";
import type { FleetIdle } from "../../api/fleetQueries";
import { FrameSearch } from "./FlameView";
import type { SearchResult } from "./flameModel";

/** A graph's search and orientation, as the view keeps them. */
export interface FleetFlameNav {
  query: string;
  setQuery: (query: string) => void;
  found: SearchResult | null;
  icicle: boolean;
  setIcicle: (icicle: boolean) => void;
}

function IdleSelect({ idle, onChange }: { idle: FleetIdle; onChange: (idle: FleetIdle) => void }) {
  return (
    <label className="inline-label">
      Idle task{" "}
      <select aria-label="Idle task" value={idle} onChange={(e) => onChange(e.target.value as FleetIdle)}>
        <option value="exclude">without idle</option>
        <option value="include">with idle</option>
        <option value="only">idle only</option>
      </select>
    </label>
  );
}

export function FleetFlameToolbar({
  idle,
  onIdle,
  nav,
  children,
}: {
  idle: FleetIdle;
  onIdle: (idle: FleetIdle) => void;
  nav: FleetFlameNav;
  children?: ReactNode;
}) {
  return (
    <div className="toolbar">
      <IdleSelect idle={idle} onChange={onIdle} />
      <FrameSearch
        query={nav.query}
        onQuery={nav.setQuery}
        found={nav.found}
        icicle={nav.icicle}
        onIcicle={nav.setIcicle}
      />
      {children}
    </div>
  );
}
