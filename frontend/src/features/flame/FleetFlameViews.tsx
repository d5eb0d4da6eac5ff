// SPDX-License-Identifier: Apache-2.0
// A kernel-build group's flame graphs (the fleet's group page composes them, pages/FleetGroupPage.tsx): its
// hosts' stacks merged into one tree by function (the server merges them; the flame worker parses the
// answer and lays the tree out, useFleetTree.ts), and a comparison of two sides of the group — hosts by label (one
// rack against the others) or two ranges (before and after a roll-out) — as a differential flame graph.
// Search and zoom are the view's own state; the group's label filter and range come from the page; the
// comparison asked for is kept in the URL (cmp=labels|ranges, a, bmode, b, a_from/a_to, b_from/b_to).
import { useCallback, useMemo, useState } from "react";
import { useSearchParams } from "react-router-dom";
import { useFleetFlame, useFleetFlameDiff, type CompareSide, type FleetIdle } from "../../api/fleetQueries";
import type { FleetFlameDiff, FleetFlameGraph } from "../../api/types";
import { formatCount } from "../../lib/format";
import { formatRange, parseRange, rangeParams, resolveRange, type TimeRange } from "../../lib/timeRange";
import { TimeRangePicker } from "../../shared/TimeRangePicker";
import { FlameGraph } from "./FlameGraph";
import { FleetFlameToolbar } from "./FleetFlameToolbar";
import { findPath, pathOf, search, type FlameFrame, type FlameLayout } from "./flameModel";
import { useFleetTree } from "./useFleetTree";

export interface FleetFlameProps {
  groupId: string;
  /** The group's label filter (key=value each), applied to every side. */
  labels: string[];
  range: TimeRange;
}

/** Labels typed as key=value, separated by spaces or commas. */
export function splitLabels(text: string): string[] {
  return text
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);
}

/** A function's view on a host of the group that has samples, over the range (the fleet has no view of its own). */
function hrefOn(hostId: string | undefined, range: TimeRange) {
  return (fid: number) => {
    if (!hostId) return "#";
    const r = rangeParams(range);
    return `/hosts/${encodeURIComponent(hostId)}/functions/${fid}?from=${encodeURIComponent(r.from)}&to=${encodeURIComponent(r.to)}`;
  };
}

/** Search, zoom (by the path of frame names, so it survives a refreshed tree) and orientation of a graph. */
function useNavigation(state: { layout: FlameLayout | null; frames: FlameFrame[] }) {
  const [query, setQuery] = useState("");
  const [zoom, setZoom] = useState("");
  const [icicle, setIcicle] = useState(false);
  const { layout, frames } = state;
  const focus = useMemo(() => (layout ? findPath(layout, frames, zoom) : 0), [layout, frames, zoom]);
  const found = useMemo(() => (layout ? search(layout, frames, query) : null), [layout, frames, query]);
  const onFocus = useCallback(
    (node: number) => {
      if (layout) setZoom(node > 0 ? pathOf(layout, frames, node) : "");
    },
    [layout, frames],
  );
  return { query, setQuery, icicle, setIcicle, focus, found, onFocus };
}

type Rollup = FleetFlameGraph["rollup"];

/** What the backend summed the samples from (the answer's `rollup`): the build's stack rollup answers whatever
 * the number of hosts; a label that keeps only a few hosts, or the `comm` filter, reads each host's own. */
const ROLLUP_READ: Record<Rollup, string> = {
  group: "the build's stack rollup",
  group_less_hosts: "the build's stack rollup less the left-out hosts' own",
  hosts: "each host's own stack rollups",
};

function Covered({ from, to, rollup }: { from: string | null; to: string | null; rollup: Rollup }) {
  return from && to ? (
    <>
      read from {ROLLUP_READ[rollup]}, covering {new Date(from).toLocaleTimeString()} –{" "}
      {new Date(to).toLocaleTimeString()} (whole minutes already rolled up)
    </>
  ) : (
    <>no whole rolled-up minute in this range yet</>
  );
}

export function FleetFlameView({ groupId, labels, range }: FleetFlameProps) {
  const [idle, setIdle] = useState<FleetIdle>("exclude");
  const flame = useFleetFlame(groupId, labels, range, idle);
  const state = useFleetTree<Omit<FleetFlameGraph, "frames" | "nodes">>(flame.data);
  const nav = useNavigation(state);
  const d = state.summary;
  const sampled = d?.hosts.filter((h) => h.samples > 0) ?? [];
  return (
    <div className="flame-view">
      <FleetFlameToolbar idle={idle} onIdle={setIdle} nav={nav} />
      {(flame.isPending || (flame.data && !d)) && <p className="muted">Loading the group&apos;s stacks…</p>}
      {flame.isError && (
        <p className="error" role="alert">
          Could not load the group&apos;s flame graph: {flame.error.message}
        </p>
      )}
      {state.error && (
        <p className="error" role="alert">
          The flame graph could not be laid out: {state.error}
        </p>
      )}
      {d && (
        <p className="muted small" data-testid="fleet-flame-summary">
          {formatCount(d.samples)} samples with a stack from {sampled.length} of {d.hosts.length} host
          {d.hosts.length === 1 ? "" : "s"} over {formatRange(range)}:{" "}
          <Covered from={d.covered_from} to={d.covered_to} rollup={d.rollup} />.
          {d.folded_samples > 0 && <> {formatCount(d.folded_samples)} samples folded to bound the tree.</>}
        </p>
      )}
      {d && d.samples === 0 && <p className="muted">No call stacks from this group in the range.</p>}
      {state.layout && d && d.samples > 0 && (
        <FlameGraph
          layout={state.layout}
          frames={state.frames}
          orientation={nav.icicle ? "icicle" : "flame"}
          focus={nav.focus}
          onFocus={nav.onFocus}
          search={nav.found}
          functionHref={hrefOn(sampled[0]?.id, range)}
          seconds={d.seconds}
          label="Group flame graph"
        />
      )}
    </div>
  );
}

type CompareBy = "labels" | "ranges";

/** The sides a comparison's form describes (null: it cannot be asked yet). */
export function compareSides(
  by: CompareBy,
  aText: string,
  bOthers: boolean,
  bText: string,
  aRange: TimeRange,
  bRange: TimeRange,
): { a: CompareSide; b: CompareSide } | null {
  if (by === "ranges") {
    return { a: { labels: [], without: [], range: aRange }, b: { labels: [], without: [], range: bRange } };
  }
  const a = splitLabels(aText);
  if (!a.length) return null;
  const b = bOthers ? { labels: [], without: a } : { labels: splitLabels(bText), without: [] };
  if (!bOthers && !b.labels.length) return null;
  return { a: { labels: a, without: [], range: null }, b: { ...b, range: null } };
}

function SideHosts({ name, side, samples }: { name: string; side: FleetFlameDiff["a"]; samples: number }) {
  const sampled = side.hosts.filter((h) => h.samples > 0).length;
  const who = [...labelList(side.labels), ...labelList(side.without).map((l) => `not ${l}`)];
  return (
    <>
      {name}: {formatCount(samples)} samples from {sampled} of {side.hosts.length} host
      {side.hosts.length === 1 ? "" : "s"}
      {who.length > 0 && <> ({who.join(", ")})</>} over {Math.round(side.seconds)} s, read from{" "}
      {ROLLUP_READ[side.rollup]}
    </>
  );
}

function labelList(labels: Record<string, string>): string[] {
  return Object.entries(labels).map(([k, v]) => `${k}=${v}`);
}

/** The comparison asked for, as the URL keeps it (cmp, a, bmode, b, a_from/a_to, b_from/b_to). */
function askedIn(p: URLSearchParams) {
  const by = p.get("cmp");
  if (by !== "labels" && by !== "ranges") return null;
  return compareSides(
    by,
    p.get("a") ?? "",
    p.get("bmode") !== "labels",
    p.get("b") ?? "",
    parseRange(p.get("a_from"), p.get("a_to")),
    parseRange(p.get("b_from"), p.get("b_to")),
  );
}

export function FleetCompareView({ groupId, labels, range }: FleetFlameProps) {
  const [search, setSearch] = useSearchParams();
  const [by, setBy] = useState<CompareBy>(search.get("cmp") === "ranges" ? "ranges" : "labels");
  const [aText, setAText] = useState(search.get("a") ?? "");
  const [bText, setBText] = useState(search.get("b") ?? "");
  const [bOthers, setBOthers] = useState(search.get("bmode") !== "labels");
  // Before and after: by default the hour before the page's range against it.
  const [aRange, setARange] = useState<TimeRange>(() => {
    if (search.get("a_from")) return parseRange(search.get("a_from"), search.get("a_to"));
    const r = resolveRange(range);
    const span = r.to.getTime() - r.from.getTime();
    return { kind: "absolute", from: new Date(r.from.getTime() - span), to: r.from };
  });
  const [bRange, setBRange] = useState<TimeRange>(() =>
    search.get("b_from") ? parseRange(search.get("b_from"), search.get("b_to")) : range,
  );
  const [idle, setIdle] = useState<FleetIdle>("exclude");
  const asked = useMemo(() => askedIn(search), [search]);
  const ask = () => {
    const next = new URLSearchParams(search);
    for (const k of ["cmp", "a", "bmode", "b", "a_from", "a_to", "b_from", "b_to"]) next.delete(k);
    next.set("cmp", by);
    if (by === "labels") {
      next.set("a", splitLabels(aText).join(" "));
      next.set("bmode", bOthers ? "others" : "labels");
      if (!bOthers) next.set("b", splitLabels(bText).join(" "));
    } else {
      const a = rangeParams(aRange);
      const b = rangeParams(bRange);
      next.set("a_from", a.from);
      next.set("a_to", a.to);
      next.set("b_from", b.from);
      next.set("b_to", b.to);
    }
    setSearch(next);
  };
  const diff = useFleetFlameDiff(groupId, labels, range, asked, idle);
  const state = useFleetTree<Omit<FleetFlameDiff, "frames" | "nodes">>(diff.data);
  const nav = useNavigation(state);
  const formSides = compareSides(by, aText, bOthers, bText, aRange, bRange);
  const d = state.summary;
  const firstB = d?.b.hosts.find((h) => h.samples > 0)?.id;
  const bAsked: TimeRange | null = d ? { kind: "absolute", from: new Date(d.b.from), to: new Date(d.b.to) } : null;
  return (
    <div className="flame-view">
      <form
        className="toolbar"
        aria-label="Compare"
        onSubmit={(e) => {
          e.preventDefault();
          ask();
        }}
      >
        <fieldset className="inline-label">
          <legend className="sr-only">Compare by</legend>
          <label>
            <input type="radio" name="by" checked={by === "labels"} onChange={() => setBy("labels")} /> hosts by label
          </label>{" "}
          <label>
            <input type="radio" name="by" checked={by === "ranges"} onChange={() => setBy("ranges")} /> two ranges
          </label>
        </fieldset>
        {by === "labels" ? (
          <>
            <label className="inline-label">
              A: hosts with{" "}
              <input
                aria-label="Side A labels"
                placeholder="rack=r1"
                value={aText}
                onChange={(e) => setAText(e.target.value)}
              />
            </label>
            <label className="inline-label">
              B:{" "}
              <select
                aria-label="Side B"
                value={bOthers ? "others" : "labels"}
                onChange={(e) => setBOthers(e.target.value === "others")}
              >
                <option value="others">hosts without any of its labels (the others)</option>
                <option value="labels">hosts with</option>
              </select>
            </label>
            {!bOthers && (
              <input
                aria-label="Side B labels"
                placeholder="rack=r2"
                value={bText}
                onChange={(e) => setBText(e.target.value)}
              />
            )}
          </>
        ) : (
          <>
            <TimeRangePicker range={aRange} onChange={setARange} label="Range A (before)" />
            <TimeRangePicker range={bRange} onChange={setBRange} label="Range B (after)" />
          </>
        )}
        <button type="submit" disabled={!formSides}>
          Compare
        </button>
      </form>
      <FleetFlameToolbar idle={idle} onIdle={setIdle} nav={nav}>
        <span className="diff-legend" aria-label="Colours">
          <span className="swatch grew" /> share grew from the baseline (A) to the comparison (B){" "}
          <span className="swatch shrank" /> shrank
        </span>
      </FleetFlameToolbar>
      {!asked && <p className="muted">Pick the two sides and press Compare.</p>}
      {diff.isError && (
        <p className="error" role="alert">
          Could not compare: {diff.error.message}
        </p>
      )}
      {state.error && (
        <p className="error" role="alert">
          The flame graph could not be laid out: {state.error}
        </p>
      )}
      {asked && (diff.isPending || (diff.data && !d)) && <p className="muted">Comparing the group&apos;s stacks…</p>}
      {d && (
        <p className="muted small" data-testid="fleet-diff-summary">
          <SideHosts name="Baseline (A)" side={d.a} samples={d.a_samples} /> ·{" "}
          <SideHosts name="comparison (B)" side={d.b} samples={d.b_samples} />
        </p>
      )}
      {d && d.a_samples + d.b_samples === 0 && <p className="muted">Neither side has call stacks.</p>}
      {state.layout && d && d.a_samples + d.b_samples > 0 && (
        <FlameGraph
          layout={state.layout}
          frames={state.frames}
          orientation={nav.icicle ? "icicle" : "flame"}
          focus={nav.focus}
          onFocus={nav.onFocus}
          search={nav.found}
          functionHref={hrefOn(firstB, bAsked ?? range)}
          seconds={d.a.seconds}
          bSeconds={d.b.seconds}
          label="Group differential flame graph"
        />
      )}
    </div>
  );
}
