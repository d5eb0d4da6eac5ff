// SPDX-License-Identifier: Apache-2.0
// Two ranges (or two hosts) as one differential flame graph: frames merged across both, each as wide as
// its average share of the two, red where its share grew from the baseline (A) to the comparison (B) and
// blue where it shrank. Filters, search and zoom work as in the flame graph; search and zoom are this
// graph's own (dq/dzoom), not the flame tab's.
import { useCallback, useMemo } from "react";
import { useFlameDiff } from "../../api/queries";
import type { FlameDiffData } from "../../api/types";
import { formatCount } from "../../lib/format";
import { rangeSearch, type HostView, type StackFilterView } from "../../lib/urlState";
import type { TimeRange } from "../../lib/timeRange";
import { FlameGraph } from "./FlameGraph";
import { FrameSearch, StackFilterBar } from "./FlameView";
import type { FlameInput } from "./flameModel";
import { useFlameLayout } from "./useFlameLayout";
import { DIFF_NAV, useFlameNavigation } from "./useFlameNavigation";

export function toDiffInput(d: FlameDiffData): FlameInput {
  return {
    frames: d.frames,
    frame: d.nodes.frame,
    parent: d.nodes.parent,
    total: d.nodes.a_total,
    self: d.nodes.a_self,
    bTotal: d.nodes.b_total,
    bSelf: d.nodes.b_self,
  };
}

export function DiffFlameView({
  hostId,
  view,
  update,
  a,
  b,
  bHostId,
}: {
  hostId: string;
  view: HostView;
  update: (patch: Partial<HostView>, options?: { push?: boolean }) => void;
  a: TimeRange;
  b: TimeRange;
  bHostId: string;
}) {
  const query = useMemo(() => {
    if (a.kind !== "absolute" || b.kind !== "absolute") return null;
    return {
      a: { from: a.from.toISOString(), to: a.to.toISOString() },
      b: { from: b.from.toISOString(), to: b.to.toISOString() },
      bHost: view.bHost,
      filter: view.filter,
    };
  }, [a, b, view.bHost, view.filter]);
  const diff = useFlameDiff(hostId, query);
  const input = useMemo(() => (diff.data ? toDiffInput(diff.data) : null), [diff.data]);
  const state = useFlameLayout(input);
  const { layout, frames, focus, found, onFocus } = useFlameNavigation(state, view, update, DIFF_NAV);
  const functionHref = useCallback(
    (fid: number) => `/hosts/${encodeURIComponent(bHostId)}/functions/${fid}?${rangeSearch(b)}`,
    [bHostId, b],
  );
  const setFilter = (patch: Partial<StackFilterView>) =>
    update({ filter: { ...view.filter, ...patch }, diffZoom: "" }, { push: true });
  const d = diff.data;
  return (
    <div className="flame-view">
      <StackFilterBar filter={view.filter} contexts={undefined} onChange={setFilter} />
      <div className="toolbar">
        <FrameSearch
          query={view.diffQuery}
          onQuery={(q) => update({ diffQuery: q }, { push: false })}
          found={found}
          icicle={view.icicle}
          onIcicle={(icicle) => update({ icicle }, { push: false })}
        />
        <span className="diff-legend" aria-label="Colours">
          <span className="swatch grew" /> share grew from the baseline (A) to the comparison (B){" "}
          <span className="swatch shrank" /> shrank
        </span>
      </div>
      {diff.isError && (
        <p className="error" role="alert">
          Could not compare stacks: {diff.error.message}
        </p>
      )}
      {state.error && (
        <p className="error" role="alert">
          The flame graph could not be laid out: {state.error}
        </p>
      )}
      {diff.isPending && query && <p className="muted">Comparing stacks…</p>}
      {d && (
        <p className="muted small" data-testid="diff-summary">
          Baseline (A): {formatCount(d.a_samples)} samples with a stack over {Math.round(d.a.seconds)} s · comparison
          (B): {formatCount(d.b_samples)} over {Math.round(d.b.seconds)} s
          {d.b_host_id !== d.a_host_id && <> (host {d.b_host_id})</>}
        </p>
      )}
      {d && d.a_samples + d.b_samples === 0 && <p className="muted">Neither range has call stacks for this filter.</p>}
      {layout && d && d.a_samples + d.b_samples > 0 && (
        <FlameGraph
          layout={layout}
          frames={frames}
          orientation={view.icicle ? "icicle" : "flame"}
          focus={focus}
          onFocus={onFocus}
          search={found}
          functionHref={functionHref}
          seconds={d.a.seconds}
          bSeconds={d.b.seconds}
          label="Differential flame graph"
        />
      )}
    </div>
  );
}
