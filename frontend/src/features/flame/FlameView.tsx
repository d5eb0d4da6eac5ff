// SPDX-License-Identifier: Apache-2.0
// The host's flame graph for the page's time range: filtered by process, command and CPU, the idle task's
// samples left out by default (their count shown, one click to include them or see them alone), search
// with the share of samples it matches, flame or icicle, zoom kept in the URL by the frames' names, and
// the range's stacks downloadable as pprof. The reply is parsed and its tree laid out in a worker, which
// keeps the stacks' frames it fetched for the page's life and in the browser's storage (flameLoad.ts).
import { useCallback, useEffect, useState } from "react";
import { useFlameGraph, type StackFilter } from "../../api/queries";
import type { StackContexts } from "../../api/types";
import { formatCount, formatShare } from "../../lib/format";
import { formatRange } from "../../lib/timeRange";
import { rangeSearch, type HostView, type IdleMode, type StackFilterView } from "../../lib/urlState";
import { FlameGraph } from "./FlameGraph";
import { keepsDefinitions, loadFlameInWorker, prepareFlame } from "./flameLoad";
import type { FlameFrame, SearchResult } from "./flameModel";
import { useFlameNavigation } from "./useFlameNavigation";
import { PprofButton } from "../../shared/PprofButton";

const NO_FRAMES: FlameFrame[] = [];
/** A page whose browser keeps none of the host's definitions asks for them with the samples. */
const needsDefinitions = (hostId: string) => !keepsDefinitions(hostId);

export function FlameView({
  hostId,
  view,
  update,
  live,
}: {
  hostId: string;
  view: HostView;
  update: (patch: Partial<HostView>, options?: { push?: boolean }) => void;
  live: boolean;
}) {
  const filter: StackFilter = view.filter;
  // The worker starts, and reads what the browser kept of the host, while the samples are asked for.
  useEffect(() => prepareFlame(hostId), [hostId]);
  const fg = useFlameGraph(hostId, view.range, live, filter, loadFlameInWorker, true, needsDefinitions);
  const { layout, frames, focus, found, onFocus } = useFlameNavigation(
    { layout: fg.data?.layout ?? null, frames: fg.data?.frames ?? NO_FRAMES },
    view,
    update,
  );
  const functionHref = useCallback(
    (fid: number) => `/hosts/${encodeURIComponent(hostId)}/functions/${fid}?${rangeSearch(view.range)}`,
    [hostId, view.range],
  );
  const setFilter = (patch: Partial<StackFilterView>) =>
    update({ filter: { ...view.filter, ...patch }, flameZoom: "" }, { push: true });
  const loaded = fg.data;
  const d = loaded?.summary;

  return (
    <div className="flame-view">
      <StackFilterBar filter={view.filter} contexts={d?.contexts} onChange={setFilter} />
      <div className="toolbar">
        <FrameSearch
          query={view.flameQuery}
          onQuery={(q) => update({ flameQuery: q }, { push: false })}
          found={found}
          matchesTestId="flame-matches"
          icicle={view.icicle}
          onIcicle={(icicle) => update({ icicle }, { push: false })}
        />
        <PprofButton hostId={hostId} range={view.range} filter={filter} />
      </div>
      {fg.isError && (
        <p className="error" role="alert">
          Could not load the flame graph: {fg.error.message}
        </p>
      )}
      {loaded && d && (
        <p className="muted small" data-testid="flame-summary">
          {formatCount(d.samples)} samples with a call stack in {formatRange(view.range)}
          {view.filter.idle === "exclude" && d.contexts.idle_samples > 0 && (
            <>
              {" "}
              · idle task {formatCount(d.contexts.idle_samples)} samples (
              {formatShare(d.contexts.all_samples ? d.contexts.idle_samples / d.contexts.all_samples : 0)}) not shown
            </>
          )}
          {d.undefined_samples > 0 && <> · {formatCount(d.undefined_samples)} of stacks the host never defined</>}
          {loaded.folded > 0 && <> · {formatCount(loaded.folded)} in frames folded to keep the graph small</>}
          <> · read, merged and laid out in {Math.round(loaded.ms)} ms in a worker</>
          {loaded.asked > 0 && <> · frames of {formatCount(loaded.asked)} stacks fetched</>}
        </p>
      )}
      {fg.isPending && <p className="muted">Loading stacks…</p>}
      {d && d.samples === 0 && (
        <p className="muted">
          No call stacks in {formatRange(view.range)} for this filter
          {view.filter.idle === "exclude" && d.contexts.idle_samples ? " (the idle task's are left out)" : ""}.
        </p>
      )}
      {layout && d && d.samples > 0 && (
        <FlameGraph
          layout={layout}
          frames={frames}
          orientation={view.icicle ? "icicle" : "flame"}
          focus={focus}
          onFocus={onFocus}
          search={found}
          functionHref={functionHref}
          seconds={d.seconds}
          label={`Flame graph of ${formatRange(view.range)}`}
        />
      )}
    </div>
  );
}

/** The flame graphs' search (with the share of samples it matches) and their flame/icicle switch. */
export function FrameSearch({
  query,
  onQuery,
  found,
  matchesTestId,
  icicle,
  onIcicle,
}: {
  query: string;
  onQuery: (query: string) => void;
  found: SearchResult | null;
  matchesTestId?: string;
  icicle: boolean;
  onIcicle: (icicle: boolean) => void;
}) {
  return (
    <>
      <input
        type="search"
        className="search"
        aria-label="Search frames"
        placeholder="Search frames: substring or /regex/"
        value={query}
        onChange={(e) => onQuery(e.target.value)}
      />
      {found && (
        <span className="muted" data-testid={matchesTestId}>
          {formatCount(found.count)} frames match, {formatShare(found.share)} of samples
        </span>
      )}
      <span className="segmented" role="group" aria-label="Orientation">
        <button type="button" aria-pressed={!icicle} onClick={() => onIcicle(false)}>
          Flame
        </button>
        <button type="button" aria-pressed={icicle} onClick={() => onIcicle(true)}>
          Icicle
        </button>
      </span>
    </>
  );
}

export function StackFilterBar({
  filter,
  contexts,
  onChange,
}: {
  filter: StackFilterView;
  contexts: StackContexts | undefined;
  onChange: (patch: Partial<StackFilterView>) => void;
}) {
  const [pidText, setPidText] = useState("");
  const procs = contexts?.processes ?? [];
  const comms = contexts?.commands ?? [];
  const cpus = contexts?.cpus ?? [];
  const idleModes: { id: IdleMode; label: string }[] = [
    { id: "exclude", label: "without idle" },
    { id: "include", label: "with idle" },
    { id: "only", label: "idle only" },
  ];
  return (
    <div className="toolbar stack-filter" role="group" aria-label="Stack filter">
      <label className="inline-label">
        Process{" "}
        <select
          aria-label="Process"
          value={filter.pid === null ? "" : String(filter.pid)}
          onChange={(e) => onChange({ pid: e.target.value === "" ? null : Number(e.target.value) })}
        >
          <option value="">all processes</option>
          {filter.pid !== null && !procs.some((p) => p.pid === filter.pid) && (
            <option value={filter.pid}>pid {filter.pid}</option>
          )}
          {procs
            .filter((p) => p.pid !== 0)
            .map((p) => (
              <option key={`${p.pid}:${p.comm}`} value={p.pid}>
                {p.pid === -1 ? "tasks that were exiting" : p.comm || "?"} ({p.pid}) · {formatCount(p.samples)}
              </option>
            ))}
        </select>
      </label>
      <form
        className="inline-label"
        onSubmit={(e) => {
          e.preventDefault();
          const n = Number(pidText);
          if (Number.isInteger(n) && n >= 0) onChange({ pid: n });
        }}
      >
        <input
          aria-label="Pid"
          placeholder="pid"
          size={7}
          value={pidText}
          onChange={(e) => setPidText(e.target.value)}
        />
      </form>
      <label className="inline-label">
        Command{" "}
        <select
          aria-label="Command"
          value={filter.comm ?? ""}
          onChange={(e) => onChange({ comm: e.target.value || null })}
        >
          <option value="">all commands</option>
          {filter.comm !== null && !comms.some((c) => c.comm === filter.comm) && (
            <option value={filter.comm}>{filter.comm}</option>
          )}
          {comms
            .filter((c) => c.comm !== "swapper")
            .map((c) => (
              <option key={c.comm} value={c.comm}>
                {c.comm || "?"} · {formatCount(c.samples)}
              </option>
            ))}
        </select>
      </label>
      <label className="inline-label">
        CPU{" "}
        <select
          aria-label="CPU"
          value={filter.cpu === null ? "" : String(filter.cpu)}
          onChange={(e) => onChange({ cpu: e.target.value === "" ? null : Number(e.target.value) })}
        >
          <option value="">all CPUs</option>
          {filter.cpu !== null && !cpus.some((c) => c.cpu === filter.cpu) && (
            <option value={filter.cpu}>CPU {filter.cpu}</option>
          )}
          {cpus.map((c) => (
            <option key={c.cpu} value={c.cpu}>
              CPU {c.cpu} · {formatCount(c.samples)}
            </option>
          ))}
        </select>
      </label>
      <span className="segmented" role="group" aria-label="Idle task">
        {idleModes.map((m) => (
          <button key={m.id} type="button" aria-pressed={filter.idle === m.id} onClick={() => onChange({ idle: m.id })}>
            {m.label}
          </button>
        ))}
      </span>
      {contexts && (
        <span className="muted small">
          idle task: {formatCount(contexts.idle_samples)} of {formatCount(contexts.all_samples)} samples
        </span>
      )}
      {(filter.pid !== null || filter.comm !== null || filter.cpu !== null) && (
        <button type="button" onClick={() => onChange({ pid: null, comm: null, cpu: null })}>
          Clear filter
        </button>
      )}
    </div>
  );
}
