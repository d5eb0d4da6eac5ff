// SPDX-License-Identifier: Apache-2.0
// One function of a host: its summary, the control-flow graph coloured by its samples over the chosen
// time range (laid out in a Web Worker, with progress while that runs), the instructions of the
// selected block with their samples (the hottest marked), its callers and callees from sampled call
// stacks, and its direct callees from its code. Range, selected block and colour scale are in the URL.
// Opened for a measurement (?measurement=ID&row=N, linked from the measure page), a "Measurement"
// overlay draws that measurement's block counts as the colours (no data distinct from zero) and its
// derived edge counts as edge widths and labels, shaped in a worker.
import { useLiveTopics } from "../../api/live";
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { Link, useNavigate, useParams, useSearchParams } from "react-router-dom";
import { ApiError } from "../../api/client";
import {
  useFunctionDetail,
  useFunctionSamples,
  useInstalledPlans,
  useInstructionSamples,
  useInstructions,
  useMakePlan,
  useMe,
} from "../../api/queries";
import { InstalledCopyBadge } from "../../shared/InstalledCopyBadge";
import { installedCopies, installedCopyOf } from "../../shared/installedCopies";
import { useAuth } from "../../shared/AuthContext";
import type { FunctionDetail } from "../../api/types";
import { formatAddress, formatOffset } from "../../lib/address";
import { formatBytes, formatCount, formatRate } from "../../lib/format";
import { formatRange } from "../../lib/timeRange";
import { measureLink, rangeSearch, readFunctionView, useUrlView, writeFunctionView } from "../../lib/urlState";
import { LiveBar } from "../../shared/LiveBar";
import { TimeRangePicker } from "../../shared/TimeRangePicker";
import { CfgGraph } from "./CfgGraph";
import { InstructionsPanel, instructionCounts } from "./InstructionsPanel";
import { CallersCallees } from "./CallersCallees";
import { groupCallees } from "./calleesModel";
import { blockSamplesMap, buildCfgModel, type CfgLayout, type PositionedNode } from "../../shared/cfg/cfgModel";
import { findBlock, hottestNode, initialView } from "./cfgView";
import { NO_DATA_FILL, colourScale, isDarkFill, stickyMax, type ScaleMode } from "../../shared/cfg/colourScale";
import { useCfgLayout } from "../../shared/cfg/useCfgLayout";
import { useMeasuredOverlay } from "./useMeasuredOverlay";
import { useMeasurementCfg } from "../../api/measureQueries";

export function FunctionPage() {
  const { hostId = "", functionId = "" } = useParams();
  const fid = /^\d+$/.test(functionId) ? Number(functionId) : NaN;
  const valid = Number.isSafeInteger(fid);
  const [search] = useSearchParams();
  const target = search.get("target") ?? "kernel";
  const detail = useFunctionDetail(hostId, fid, valid, target);
  useLiveTopics([`host:${hostId}`]);
  const hostLink = `/hosts/${encodeURIComponent(hostId)}`;

  if (!valid || (detail.isError && detail.error instanceof ApiError && detail.error.status === 404)) {
    const msg = detail.error?.message === "Host not found" ? "Host not found" : "Function not found";
    return (
      <section className="notice">
        <h1>{msg}</h1>
        <p>
          {msg === "Host not found" ? (
            <Link to="/">Back to the host list</Link>
          ) : (
            <Link to={hostLink}>Back to the host</Link>
          )}
        </p>
      </section>
    );
  }
  if (detail.isError) {
    return (
      <section className="notice">
        <h1>Could not load the function</h1>
        <p className="error" role="alert">
          {detail.error.message}
        </p>
        <p>
          <Link to={hostLink}>Back to the host</Link>
        </p>
      </section>
    );
  }
  if (!detail.data) return <p className="muted">Loading function…</p>;
  return <FunctionView hostId={hostId} detail={detail.data} target={target} />;
}

function FunctionView({ hostId, detail, target }: { hostId: string; detail: FunctionDetail; target: string }) {
  const fn = detail.function;
  const [view, update] = useUrlView(readFunctionView, writeFunctionView);
  const [paused, setPaused] = useState(false);
  const live = view.range.kind === "relative" && !paused;
  // PC samples and call stacks are the kernel's (the sampler covers kernel code only); a process's
  // functions are measured from its measure page instead.
  const kernel = target === "kernel";
  const samples = useFunctionSamples(hostId, fn.id, view.range, live, kernel);
  const instructionsWanted = view.block !== null;
  const instructions = useInstructions(hostId, fn.id, instructionsWanted, target);
  const insnSamples = useInstructionSamples(hostId, fn.id, view.range, live, kernel);
  const insnCounts = useMemo(
    () => (insnSamples.data ? instructionCounts(insnSamples.data.items) : null),
    [insnSamples.data],
  );

  // The layout depends only on the code; sample counts only recolour it.
  const model = useMemo(() => buildCfgModel(detail, null), [detail]);
  const layoutState = useCfgLayout(model);
  const sampleMap = useMemo(() => (samples.data ? blockSamplesMap(samples.data.blocks) : null), [samples.data]);

  // The colour domain only grows while the same range and scale are shown.
  const domain = useRef<{ key: string; max: number | null }>({ key: "", max: null });
  const coloured = useMemo(() => {
    const base = layoutState.layout;
    if (!base) return null;
    let max = 0;
    const nodes = base.nodes.map((n) => {
      if (n.kind !== "block" || !n.block) return n;
      const s = sampleMap ? (sampleMap.get(n.block.offset) ?? 0) : null;
      if (s !== null) max = Math.max(max, s);
      return { ...n, samples: s };
    });
    return { layout: { ...base, nodes }, max };
  }, [layoutState.layout, sampleMap]);
  const domainKey = `${fn.id}|${view.range.kind === "relative" ? view.range.seconds : view.range.from.getTime()}|${view.scale}`;
  if (domain.current.key !== domainKey) domain.current = { key: domainKey, max: null };
  const scaleMax = stickyMax(domain.current.max, coloured?.max ?? 0);
  domain.current.max = scaleMax;
  const mode: ScaleMode = view.scale;
  const colour = useMemo(() => colourScale(mode, scaleMax), [mode, scaleMax]);
  const dark = useCallback((s: number | null) => isDarkFill(mode, scaleMax, s), [mode, scaleMax]);

  // The measurement overlay (block counts and derived edge counts of one measured function row).
  const [params] = useSearchParams();
  const mid = params.get("measurement");
  const rowText = params.get("row");
  const mRow = rowText && /^\d+$/.test(rowText) ? Number(rowText) : null;
  const [overlayOn, setOverlayOn] = useState(true);
  const mcfg = useMeasurementCfg(hostId, mid, mRow, !paused);
  const overlay = useMeasuredOverlay(layoutState.layout, overlayOn ? mcfg.data : undefined);
  const mDomain = useRef<{ key: string; max: number | null }>({ key: "", max: null });
  const mKey = `${mid}|${mRow}|${view.scale}`;
  if (mDomain.current.key !== mKey) mDomain.current = { key: mKey, max: null };
  const mMax = stickyMax(mDomain.current.max, overlay?.maxBlock ?? 0);
  mDomain.current.max = mMax;
  const measured = useMemo(() => {
    if (!overlay || !overlayOn || !mid || !mcfg.data) return null;
    const base = colourScale(mode, mMax);
    return {
      overlay,
      mode,
      max: mMax,
      measurementId: mid,
      rangeLabel: `${new Date(mcfg.data.from).toLocaleTimeString()}–${new Date(mcfg.data.to).toLocaleTimeString()}`,
      colour: (c: number | null) => (c === null ? NO_DATA_FILL : base(c)),
      dark: (c: number | null) => isDarkFill(mode, mMax, c),
    };
  }, [overlay, overlayOn, mid, mcfg.data, mode, mMax]);

  const selectedNode = useMemo(
    () => coloured?.layout.nodes.find((n) => n.kind === "block" && n.block?.offset === view.block) ?? null,
    [coloured, view.block],
  );
  const hottest = useMemo(() => (coloured ? hottestNode(coloured.layout.nodes) : null), [coloured]);
  const entryId = useMemo(() => model.nodes.find((n) => n.kind === "block")?.id ?? null, [model]);
  const [focus, setFocus] = useState<{ id: string; seq: number } | null>(null);
  const focusOn = useCallback((id: string) => setFocus((f) => ({ id, seq: (f?.seq ?? 0) + 1 })), []);

  const onSelect = useCallback(
    (n: PositionedNode) => {
      if (n.block) update({ block: n.block.offset }, { push: true });
    },
    [update],
  );
  // The first view uses the hottest block known when the layout arrives; later samples do not move it.
  const firstHottest = useRef<string | null>(null);
  if (firstHottest.current === null && hottest) firstHottest.current = hottest.id;
  // A linked block (block= in the URL) is what the first view shows.
  const blockAtLoad = useRef(view.block);
  const makeInitial = useCallback(
    (layout: CfgLayout, w: number, h: number) => {
      const linked = layout.nodes.find((n) => n.kind === "block" && n.block?.offset === blockAtLoad.current);
      return linked
        ? initialView(layout, w, h, linked.id, linked.id)
        : initialView(layout, w, h, entryId, firstHottest.current);
    },
    [entryId],
  );
  const onFind = useCallback(
    (q: string) => {
      if (!coloured) return "The graph is still being laid out.";
      const n = findBlock(coloured.layout.nodes, fn.address_hex, q);
      if (!n) return `No block of ${fn.name} holds ${q.trim() || "that"}.`;
      update({ block: n.block!.offset }, { push: true });
      focusOn(n.id);
      return null;
    },
    [coloured, fn.address_hex, fn.name, update, focusOn],
  );
  const goHottest = useCallback(() => {
    if (!hottest) return;
    update({ block: hottest.block!.offset }, { push: true });
    focusOn(hottest.id);
  }, [hottest, update, focusOn]);
  const goHottestInstruction = useCallback(() => {
    const off = insnCounts?.hottest;
    if (off === null || off === undefined || !coloured) return;
    const n = coloured.layout.nodes.find(
      (x) => x.kind === "block" && x.block && off >= x.block.offset && off < x.block.offset + x.block.size,
    );
    if (!n) return;
    update({ block: n.block!.offset }, { push: true });
    focusOn(n.id);
  }, [insnCounts, coloured, update, focusOn]);

  const hostLink = `/hosts/${encodeURIComponent(hostId)}`;
  const rangeText = formatRange(view.range);
  const blockCount = model.nodes.filter((n) => n.kind === "block").length;
  const callees = groupCallees(detail.callees);
  return (
    <section className="function-page">
      <p className="crumbs">
        <Link to={`${hostLink}?${rangeSearch(view.range)}`}>← host</Link> ·{" "}
        <Link to={`${hostLink}?tab=code&${rangeSearch(view.range)}`}>code</Link>
      </p>
      <h1>{fn.name}</h1>
      <OptimizeButton hostId={hostId} functionId={fn.id} />
      <InstalledCopy hostId={hostId} target={target} fn={fn} />
      <dl className="facts">
        <div>
          <dt>Module</dt>
          <dd>{fn.module}</dd>
        </div>
        <div>
          <dt>Address</dt>
          <dd className="addr">{formatAddress(fn.address_hex, fn.address)}</dd>
        </div>
        <div>
          <dt>Size</dt>
          <dd>{formatBytes(fn.size)}</dd>
        </div>
        <div>
          <dt>Basic blocks</dt>
          <dd>{fn.block_count}</dd>
        </div>
        <div>
          <dt>Samples ({rangeText})</dt>
          <dd>
            {!kernel ? (
              <ProcessSamplesNote hostId={hostId} target={target} functionId={fn.id} />
            ) : samples.data ? (
              <>
                {formatCount(samples.data.total)}{" "}
                <span className="muted">({formatRate(samples.data.total / Math.max(1e-3, samples.data.seconds))})</span>
              </>
            ) : samples.isError ? (
              <span className="unavailable">
                unavailable <span className="reason">({samples.error.message})</span>
              </span>
            ) : (
              "…"
            )}
          </dd>
        </div>
      </dl>
      <div className="toolbar range-bar">
        <TimeRangePicker range={view.range} onChange={(range) => update({ range }, { push: true })} />
        <LiveBar
          range={view.range}
          paused={paused}
          onPause={setPaused}
          updatedAt={samples.dataUpdatedAt}
          fetching={samples.isFetching}
        />
      </div>
      {mid && mRow !== null && (
        <div className="toolbar measurement-bar" role="group" aria-label="Measurement overlay">
          <label>
            <input type="checkbox" checked={overlayOn} onChange={(e) => setOverlayOn(e.target.checked)} /> Measurement
          </label>
          <Link to={`/hosts/${encodeURIComponent(hostId)}/measure?m=${encodeURIComponent(mid)}`}>{mid}</Link>
          {mcfg.data && (
            <span className="small" data-testid="measurement-range">
              {mcfg.data.function}: {mcfg.data.intervals} intervals from {new Date(mcfg.data.from).toLocaleString()} to{" "}
              {new Date(mcfg.data.to).toLocaleString()} · blocks{" "}
              {mcfg.data.basis === "sampled" ? "sampled" : mcfg.data.basis === "exact" ? "exact" : "not counted"} ·
              edges{" "}
              {mcfg.data.edges.length ? (mcfg.data.basis === "sampled" ? "sampled estimates" : "derived") : "none yet"}
            </span>
          )}
          {mcfg.isError && (
            <span className="error small" role="alert">
              Measurement unavailable: {mcfg.error.message}
            </span>
          )}
        </div>
      )}
      {fn.undecodable && (
        <p className="warning" role="note">
          Undecodable: the agent could not decode this function's bytes
          {detail.undecodable_offset !== null && detail.undecodable_offset !== undefined
            ? ` from offset ${formatOffset(detail.undecodable_offset)}`
            : ""}
          ; code past that point is not in the graph.
        </p>
      )}
      <div className="function-body">
        <div className="cfg-wrap">
          <h2>Control-flow graph</h2>
          {blockCount === 0 ? (
            <p className="muted">No basic blocks were found.</p>
          ) : layoutState.error ? (
            <p className="error" role="alert">
              The graph could not be laid out: {layoutState.error}
            </p>
          ) : !coloured ? (
            <LayoutProgress
              blocks={blockCount}
              phase={layoutState.phase}
              fraction={layoutState.fraction}
              startedAt={layoutState.startedAt}
            />
          ) : (
            <CfgGraph
              layout={coloured.layout}
              hostId={hostId}
              colour={colour}
              dark={dark}
              legend={{
                mode,
                max: scaleMax,
                total: samples.data?.total ?? 0,
                samplesKnown: sampleMap !== null,
                rangeLabel: rangeText,
              }}
              selected={selectedNode?.id ?? null}
              onSelect={onSelect}
              focus={focus}
              entryId={entryId}
              hottestId={hottest?.id ?? null}
              initialView={makeInitial}
              onScaleMode={(scale) => update({ scale }, { push: false })}
              onFind={onFind}
              onGoHottest={goHottest}
              measured={measured}
            />
          )}
          {layoutState.ms !== null && coloured && (
            <p className="muted small" data-testid="layout-time">
              laid out {formatCount(blockCount)} blocks in {Math.round(layoutState.ms)} ms (in a worker)
            </p>
          )}
        </div>
        <InstructionsPanel
          block={selectedNode?.block ?? null}
          blockHex={selectedNode?.addressHex ?? null}
          instructions={instructions.data?.instructions}
          loading={instructions.isFetching && !instructions.data}
          error={instructions.isError ? instructions.error.message : null}
          samples={insnCounts}
          onGoHottest={goHottestInstruction}
        />
      </div>
      {kernel ? (
        <CallersCallees hostId={hostId} functionId={fn.id} range={view.range} live={live} />
      ) : (
        <section className="callers-callees" id="calls" aria-labelledby="calls-title">
          <h2 id="calls-title">Callers and callees</h2>
          <ProcessSamplesNote hostId={hostId} target={target} functionId={fn.id} />
        </section>
      )}
      <section className="callees" aria-labelledby="callees-title">
        <h2 id="callees-title">Callees</h2>
        {callees.length === 0 && <p className="muted">No direct calls.</p>}
        {callees.length > 0 && (
          <table className="grid callee-groups" aria-label="Callees from code">
            <thead>
              <tr>
                <th scope="col">Function</th>
                <th scope="col" className="num">
                  Call sites
                </th>
                <th scope="col">At</th>
              </tr>
            </thead>
            <tbody>
              {callees.map((g) => (
                <tr key={g.target}>
                  <td>
                    {g.functionId !== null ? (
                      <Link to={`${hostLink}/functions/${g.functionId}?${rangeSearch(view.range)}`}>
                        {g.name ?? formatAddress(g.target, g.address)}
                      </Link>
                    ) : (
                      <span className="addr">{g.name ?? formatAddress(g.target, g.address)}</span>
                    )}
                    {g.module && g.module !== fn.module && <span className="muted"> [{g.module}]</span>}{" "}
                  </td>
                  <td className="num">{formatCount(g.sites.length)} </td>
                  <td className="muted addr small">
                    {g.sites.slice(0, 4).map(formatOffset).join(", ")}
                    {g.sites.length > 4 ? ", …" : ""}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        {detail.indirect_call_sites.length > 0 && (
          <p>
            Indirect call sites ({formatCount(detail.indirect_call_sites.length)}):{" "}
            <span className="addr">{detail.indirect_call_sites.map(formatOffset).join(", ")}</span>
          </p>
        )}
      </section>
    </section>
  );
}

/** The badge when this function runs an installed copy (a member of an installed plan's group). */
function InstalledCopy({ hostId, target, fn }: { hostId: string; target: string; fn: FunctionDetail["function"] }) {
  const installed = useInstalledPlans(hostId, target);
  const copies = useMemo(() => installedCopies(installed.data), [installed.data]);
  const plan = installedCopyOf(copies, fn);
  return plan ? (
    <>
      {" "}
      <InstalledCopyBadge hostId={hostId} plan={plan} />
    </>
  ) : null;
}

/** "Optimize…": asks the host's agent for a plan of this function (operators), then opens the plan. */
function OptimizeButton({ hostId, functionId }: { hostId: string; functionId: number }) {
  const { session } = useAuth();
  const me = useMe(!!session).data ?? session?.user;
  const [search] = useSearchParams();
  const navigate = useNavigate();
  const make = useMakePlan(hostId);
  const allowed = me?.role === "operator" || me?.role === "approver" || me?.role === "admin";
  return (
    <span className="optimize">
      <button
        type="button"
        disabled={!allowed || make.isPending}
        title={allowed ? "Plan the re-layout of this function and its hot callees" : "needs the operator role"}
        onClick={() =>
          make.mutate(
            { target: search.get("target") ?? "kernel", function_id: functionId },
            { onSuccess: (p) => navigate(`/hosts/${encodeURIComponent(hostId)}/plans/${p.id}`) },
          )
        }
      >
        {make.isPending ? "Asking the agent…" : "Optimize…"}
      </button>
      {make.isError && (
        <span className="error small" role="alert">
          {" "}
          {make.error.message}
        </span>
      )}
    </span>
  );
}

function LayoutProgress({
  blocks,
  phase,
  fraction,
  startedAt,
}: {
  blocks: number;
  phase: string;
  fraction: number;
  startedAt: number;
}) {
  const [now, setNow] = useState(() => performance.now());
  // The elapsed time moves while the worker runs.
  useEffect(() => {
    const t = setInterval(() => setNow(performance.now()), 100);
    return () => clearInterval(t);
  }, []);
  const elapsed = Math.max(0, now - startedAt) / 1000;
  return (
    <div className="layout-progress" role="status" aria-live="polite">
      <p>
        Laying out {formatCount(blocks)} blocks… {phase} ({elapsed.toFixed(1)} s)
      </p>
      <progress max={1} value={fraction} aria-label="Layout progress" />
    </div>
  );
}

/** What a process function's page says where the kernel's sample views would be: not an error. */
function ProcessSamplesNote({ hostId, target, functionId }: { hostId: string; target: string; functionId: number }) {
  return (
    <span className="note" data-testid="process-samples-note">
      PC samples and call stacks cover the kernel; measure this process&apos;s functions from its{" "}
      <Link to={measureLink(hostId, target, [functionId])}>Measure page</Link>.
    </span>
  );
}
