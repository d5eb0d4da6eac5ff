// SPDX-License-Identifier: Apache-2.0
// The plan page's roll-out section (issue 19). A per-host plan a roll-out made says so and links to its
// roll-out and the approved plan it inherits from. An approved plan offers an operator "Roll out to the
// fleet": every host of its build (narrowed by labels), a canary first, then growing waves, each host's
// install guarded; and lists the roll-outs already made of it.
import { useState, type FormEvent } from "react";
import { Link, useNavigate } from "react-router-dom";
import { useMe } from "../../api/queries";
import { useRollouts, useStartRollout } from "../../api/rolloutQueries";
import type { PlanDetail } from "../../api/types";
import { useAuth } from "../../shared/AuthContext";
import { labelMap, parseLabelFilter } from "../../lib/labels";
import { RolloutTable } from "./RolloutsPage";
import { canOperate, parseWaveSizes, wavesText } from "./rolloutModel";

export function RolloutPanel({ hostId, plan }: { hostId: string; plan: PlanDetail }) {
  const { session } = useAuth();
  const me = useMe(!!session).data ?? session?.user;
  const derived = !!plan.derived_from;
  const list = useRollouts(plan.id, !derived);
  if (derived) {
    return (
      <section aria-labelledby="ro-title">
        <h2 id="ro-title">Roll-out</h2>
        <p data-testid="derived-plan">
          Made by a roll-out for this host from the approved plan{" "}
          <span className="addr">{plan.derived_from?.slice(0, 8)}</span>, whose approval it inherits (same code hash and
          build id). {plan.rollout_id && <Link to={`/rollouts/${plan.rollout_id}`}>Open the roll-out</Link>}
        </p>
      </section>
    );
  }
  const operator = canOperate(me?.role);
  const rollouts = list.data ?? [];
  if (plan.state !== "approved" && rollouts.length === 0) return null;
  return (
    <section aria-labelledby="ro-title">
      <h2 id="ro-title">Roll out to the fleet</h2>
      {plan.state === "approved" && operator && <StartForm hostId={hostId} plan={plan} />}
      {plan.state === "approved" && !operator && (
        <p className="muted">An operator can roll this approved plan out to every host of its build.</p>
      )}
      {list.isError && <p className="error">The plan&apos;s roll-outs could not be read: {list.error.message}</p>}
      {rollouts.length > 0 && <RolloutTable rollouts={rollouts} label="Roll-outs of this plan" />}
    </section>
  );
}

function StartForm({ hostId, plan }: { hostId: string; plan: PlanDetail }) {
  const start = useStartRollout();
  const navigate = useNavigate();
  const [labelText, setLabelText] = useState("");
  const [wavesDraft, setWavesDraft] = useState("");
  const [windowS, setWindowS] = useState(5);
  const [offlineS, setOfflineS] = useState(60);
  const [pairs, setPairs] = useState(6);
  const [guardWindowS, setGuardWindowS] = useState(1);
  const [mistake, setMistake] = useState<string | null>(null);
  const waves = parseWaveSizes(wavesDraft);
  const submit = (e: FormEvent) => {
    e.preventDefault();
    const labels = parseLabelFilter(labelText);
    const error = labels.error ? `Labels: ${labels.error}` : waves.error ? `Waves: ${waves.error}` : null;
    setMistake(error);
    if (error) return;
    start.mutate(
      {
        host_id: hostId,
        plan_id: plan.id,
        labels: labelMap(labels.labels),
        wave_sizes: waves.sizes,
        window_s: windowS,
        guard_pairs: pairs,
        guard_window_seconds: guardWindowS,
        offline_wait_s: offlineS,
      },
      { onSuccess: (r) => navigate(`/rollouts/${r.id}`) },
    );
  };
  const build = plan.build_id ?? "";
  return (
    <form className="rollout-start" onSubmit={submit} aria-label="Start a roll-out">
      <p className="muted">
        Every active host of build <span className="addr">{build.slice(0, 16)}</span>
        {plan.target_id === "kernel" ? " (its kernel)" : " running the plan's program"} gets this code, installed
        {plan.target_id === "kernel"
          ? ""
          : " with the guard (a host where it is slower is reverted and halts the roll-out)"}
        ; hosts of another build are never touched.
      </p>
      <label>
        Only hosts with labels{" "}
        <input
          type="search"
          value={labelText}
          placeholder="role=db rack=r1"
          onChange={(e) => setLabelText(e.target.value)}
        />
      </label>{" "}
      <label>
        Wave sizes{" "}
        <input
          value={wavesDraft}
          placeholder="1, 2, 4 (default: doubling)"
          aria-invalid={waves.error !== null}
          aria-describedby="ro-waves-help"
          onChange={(e) => setWavesDraft(e.target.value)}
        />
      </label>{" "}
      <label>
        Before/after window (s){" "}
        <input
          type="number"
          min={1}
          max={600}
          value={windowS}
          onChange={(e) => setWindowS(Number(e.target.value) || 5)}
        />
      </label>{" "}
      <label>
        Wait for an offline host (s){" "}
        <input
          type="number"
          min={1}
          max={3600}
          value={offlineS}
          onChange={(e) => setOfflineS(Number(e.target.value) || 60)}
        />
      </label>{" "}
      {plan.target_id !== "kernel" && (
        <>
          <label title="The guard's interleaved comparison on every host: pairs of windows, original and installed">
            Guard pairs{" "}
            <input
              type="number"
              min={2}
              max={50}
              value={pairs}
              onChange={(e) => setPairs(Number(e.target.value) || 6)}
            />
          </label>{" "}
          <label>
            Guard window (s){" "}
            <input
              type="number"
              min={0.2}
              max={60}
              step={0.1}
              value={guardWindowS}
              onChange={(e) => setGuardWindowS(Number(e.target.value) || 1)}
            />
          </label>{" "}
        </>
      )}
      <button type="submit" className="primary" disabled={start.isPending}>
        {start.isPending ? "Starting…" : "Start roll-out"}
      </button>
      <p id="ro-waves-help" className="muted small">
        Waves: {waves.error ? waves.error : wavesText(waves.sizes)}. A wave starts once every host of the one before has
        answered.
      </p>
      {(mistake ?? start.error) && (
        <p className="error" role="alert">
          {mistake ?? start.error?.message}
        </p>
      )}
    </form>
  );
}
