// SPDX-License-Identifier: Apache-2.0
// "Optimize hot set" on a process target's page: asks the host's agent for a plan of the process's
// whole hot set (its threads' PCs sampled for the seconds given, every hot function of one module
// planned together, every member's entry spliced at install), then opens the plan (operators).
import { useState } from "react";
import { useNavigate } from "react-router-dom";
import { useMakePlan, useMe } from "../../api/queries";
import { useAuth } from "../../shared/AuthContext";

/** The sampling window's bounds, as the backend checks them (PlanCreate, HOT_SET_MAX_SECONDS). */
export const HOT_SET_SECONDS = { min: 1, max: 120, initial: 10 };

export function OptimizeHotSet({ hostId, target }: { hostId: string; target: string }) {
  const { session } = useAuth();
  const me = useMe(!!session).data ?? session?.user;
  const navigate = useNavigate();
  const make = useMakePlan(hostId);
  const [seconds, setSeconds] = useState(HOT_SET_SECONDS.initial);
  const allowed = me?.role === "operator" || me?.role === "approver" || me?.role === "admin";
  const valid = Number.isInteger(seconds) && seconds >= HOT_SET_SECONDS.min && seconds <= HOT_SET_SECONDS.max;
  return (
    <form
      className="toolbar optimize-hot-set"
      onSubmit={(e) => {
        e.preventDefault();
        make.mutate(
          { target, hot_set: true, seconds },
          { onSuccess: (p) => navigate(`/hosts/${encodeURIComponent(hostId)}/plans/${p.id}`) },
        );
      }}
    >
      <label>
        Sample for{" "}
        <input
          type="number"
          min={HOT_SET_SECONDS.min}
          max={HOT_SET_SECONDS.max}
          value={seconds}
          onChange={(e) => setSeconds(Number(e.target.value))}
          aria-label="Seconds of PC samples"
        />{" "}
        s
      </label>
      <button
        type="submit"
        disabled={!allowed || !valid || make.isPending}
        title={
          allowed
            ? "Plan the re-layout of every hot function of this process together, from PC samples"
            : "needs the operator role"
        }
      >
        {make.isPending ? "Asking the agent…" : "Optimize hot set"}
      </button>
      {make.isError && (
        <span className="error small" role="alert">
          {" "}
          {make.error.message}
        </span>
      )}
    </form>
  );
}
