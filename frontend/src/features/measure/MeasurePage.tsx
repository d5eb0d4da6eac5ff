// SPDX-License-Identifier: Apache-2.0
// Measurements of one target (kperfmon's visis): pick functions (and their blocks), pick metrics,
// start; then a live table (resources × metrics, units on every number, exact / sampled / estimate
// labels, unavailable metrics with the agent's reason) and a live chart, fed by the WebSocket
// subscription of that measurement only. Stop and pause; command progress with Cancel. A function
// measured with its blocks links to its CFG with the measurement's counts drawn over it. Functions
// named in the URL (`fn=12,40`, from the code tree's "Measure selected") arrive already picked.
import { useEffect, useMemo, useRef, useState } from "react";
import { Link, useParams, useSearchParams } from "react-router-dom";
import { useQueries } from "@tanstack/react-query";
import { functionDetailQuery, useHost } from "../../api/queries";
import { readIdList } from "../../lib/urlState";
import { useLiveTopics } from "../../api/live";
import type { FunctionSummary, MeasurementDetail } from "../../api/types";
import { CommandStatus } from "./CommandStatus";
import { OptimizeHotSet } from "./OptimizeHotSet";
import { LayoutCandidates } from "../../shared/layout/LayoutCandidates";
import { DEFAULT_RANGE } from "../../lib/timeRange";
import { MeasureChart } from "./MeasureChart";
import { METRICS, metricAvailability, resourceNames, splitColumns, tableRows, type MetricId } from "./measureModel";
import {
  useFunctionSearch,
  useMeasurement,
  useMeasurements,
  useMeasurementSeries,
  useMeasurementValues,
  useStartMeasurement,
  useStopMeasurement,
  useTargets,
} from "../../api/measureQueries";

const WINDOW_S = 60;
const ENDED = new Set(["target_exited", "stopped", "failed"]);

interface Picked {
  fn: FunctionSummary;
  blocks: boolean;
}

export function MeasurePage() {
  const { hostId = "" } = useParams();
  const [params, setParams] = useSearchParams();
  const target = params.get("target") ?? "kernel";
  const mid = params.get("m");
  const host = useHost(hostId);
  useLiveTopics([`host:${hostId}`, mid ? `measurement:${mid}` : null]);
  const setMeasurement = (id: string | null) => {
    const next = new URLSearchParams(params);
    if (id) next.set("m", id);
    else next.delete("m");
    setParams(next);
  };
  const targets = useTargets(hostId);
  const t = targets.data?.find((x) => x.id === target);
  const kind = t?.kind === "process" || (!t && target !== "kernel") ? "process" : "kernel";
  const availability = useMemo(() => metricAvailability(kind, host.data?.capabilities ?? []), [kind, host.data]);
  const preset = useMemo(() => readIdList(params.get("fn")), [params]);
  const hostLink = <Link to={`/hosts/${encodeURIComponent(hostId)}`}>{host.data?.hostname ?? hostId}</Link>;
  if (targets.data && !t) {
    return (
      <section className="notice">
        <h1>Target not found</h1>
        <p className="error" role="alert">
          This host has no target “{target}”: attach a process on the host page first.
        </p>
        <p>Back to {hostLink}</p>
      </section>
    );
  }
  const title = target === "kernel" ? "the kernel" : t?.kind === "process" ? `${t.command} (pid ${t.pid})` : "…";
  return (
    <section className="measure-page">
      <div className="page-head">
        <h1>Measure {title}</h1>
        {hostLink}
        {t?.kind === "process" && <span className="muted small">target {t.id}</span>}
      </div>
      {t?.kind === "process" && t.state === "attached" && <OptimizeHotSet hostId={hostId} target={t.id} />}
      <NewMeasurement
        hostId={hostId}
        target={target}
        availability={availability}
        preset={preset}
        onStarted={setMeasurement}
      />
      <MeasurementList hostId={hostId} target={target} current={mid} onOpen={setMeasurement} />
      {t?.kind === "process" && <LayoutCandidates hostId={hostId} target={t.id} range={DEFAULT_RANGE} live />}
      {mid && <MeasurementView hostId={hostId} mid={mid} />}
    </section>
  );
}

/** The functions named in the URL, loaded by id; each is added to the picks once, when it arrives. */
function usePresetPicks(
  hostId: string,
  target: string,
  ids: number[],
  setPicked: (f: (old: Picked[]) => Picked[]) => void,
) {
  const details = useQueries({
    queries: ids.map((fid) => ({ ...functionDetailQuery(hostId, fid, target), retry: false })),
  });
  const seeded = useRef(new Set<number>());
  const loaded = details.flatMap((d) => (d.data ? [d.data.function] : []));
  const loadedKey = loaded.map((f) => f.id).join(",");
  useEffect(() => {
    const fresh = loaded.filter((f) => !seeded.current.has(f.id));
    if (fresh.length === 0) return;
    for (const f of fresh) seeded.current.add(f.id);
    setPicked((old) => [
      ...old,
      ...fresh.filter((f) => !old.some((p) => p.fn.id === f.id)).map((fn) => ({ fn, blocks: true })),
    ]);
    // `loaded` is a new array every render; the ids say when it changed.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [loadedKey, setPicked]);
  const failed = details.flatMap((d, i) => (d.error ? [`function ${ids[i]}: ${d.error.message}`] : []));
  return { pending: details.some((d) => d.isPending), failed };
}

function NewMeasurement({
  hostId,
  target,
  availability,
  preset,
  onStarted,
}: {
  hostId: string;
  target: string;
  availability: Record<MetricId, string | null>;
  preset: number[];
  onStarted: (id: string) => void;
}) {
  const pmuReason = availability.cycles;
  const [q, setQ] = useState("");
  const [picked, setPicked] = useState<Picked[]>([]);
  const presetState = usePresetPicks(hostId, target, preset, setPicked);
  const [wanted, setMetrics] = useState<Set<MetricId>>(new Set(["count", "wall", "vtime"]));
  // Only what this host can measure is ticked (the host's capabilities may arrive after the first render).
  const metrics = useMemo(() => new Set([...wanted].filter((m) => availability[m] === null)), [wanted, availability]);
  const softOff = METRICS.filter((m) => !m.hardware && availability[m.id] !== null);
  const [command, setCommand] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const search = useFunctionSearch(hostId, target, q.trim());
  const start = useStartMeasurement(hostId);
  const toggleMetric = (id: MetricId) =>
    setMetrics((old) => {
      const next = new Set(old);
      if (next.has(id)) next.delete(id);
      else next.add(id);
      return next;
    });
  const isPicked = (f: FunctionSummary) => picked.some((p) => p.fn.id === f.id);
  const toggle = (f: FunctionSummary) =>
    setPicked((old) => (isPicked(f) ? old.filter((p) => p.fn.id !== f.id) : [...old, { fn: f, blocks: true }]));
  const onStart = () => {
    setError(null);
    start.mutate(
      {
        // A metric ticked before the host said it cannot measure it is not asked for.
        target,
        metrics: [...metrics],
        allow_partial: true,
        resources: picked.map((p) => ({
          digest: p.fn.digest,
          function_index: p.fn.index,
          kind: "function",
          blocks: p.blocks,
        })),
      } as Parameters<typeof start.mutate>[0],
      {
        onSuccess: (c) => {
          setCommand(c.id);
          const id = (c.params as { measurement_id?: string }).measurement_id;
          if (id) onStarted(id);
        },
        onError: (e) => setError(e.message),
      },
    );
  };
  return (
    <section className="new-measurement" aria-labelledby="new-m-title">
      <h2 id="new-m-title">New measurement</h2>
      <label>
        Find functions{" "}
        <input
          type="search"
          value={q}
          onChange={(e) => setQ(e.target.value)}
          placeholder="function name"
          aria-label="Find functions"
        />
      </label>
      {search.isError && (
        <p className="error small" role="alert">
          {search.error.message}
        </p>
      )}
      {presetState.pending && <p className="muted small">Loading the selected functions…</p>}
      {presetState.failed.length > 0 && (
        <p className="error small" role="alert">
          Could not load a selected function: {presetState.failed.join("; ")}
        </p>
      )}
      {q.trim() && (
        <ul className="pick-list" aria-label="Functions found">
          {(search.data?.items ?? []).map((f) => (
            <li key={f.id}>
              <label>
                <input
                  type="checkbox"
                  checked={isPicked(f)}
                  onChange={() => toggle(f)}
                  aria-label={`Select ${f.name}`}
                />
                {f.name}{" "}
                <span className="muted small">
                  {f.module} · {f.block_count} blocks
                </span>
              </label>
            </li>
          ))}
        </ul>
      )}
      {picked.length > 0 && (
        <ul className="picked" aria-label="Selected resources">
          {picked.map((p) => (
            <li key={p.fn.id}>
              {p.fn.name}
              <label className="small">
                <input
                  type="checkbox"
                  checked={p.blocks}
                  aria-label={`Blocks of ${p.fn.name}`}
                  onChange={() =>
                    setPicked((old) => old.map((o) => (o.fn.id === p.fn.id ? { ...o, blocks: !o.blocks } : o)))
                  }
                />
                and its {p.fn.block_count} blocks
              </label>
            </li>
          ))}
        </ul>
      )}
      <fieldset className="metrics">
        <legend>Metrics</legend>
        {METRICS.filter((m) => availability[m.id] === null).map((m) => (
          <label key={m.id}>
            <input
              type="checkbox"
              checked={metrics.has(m.id)}
              aria-label={m.label}
              onChange={() => toggleMetric(m.id)}
            />
            {m.label}
          </label>
        ))}
        {softOff.length > 0 && (
          <fieldset className="metrics-off" disabled aria-label="Unavailable on this host">
            <legend className="muted">Unavailable on this host</legend>
            {softOff.map((m) => (
              <label key={m.id} className="muted" title={availability[m.id] ?? ""}>
                <input type="checkbox" disabled checked={false} aria-label={m.label} readOnly />
                {m.label} <span className="small">— {availability[m.id]}</span>
              </label>
            ))}
          </fieldset>
        )}
        {pmuReason !== null && (
          <fieldset className="metrics-off" disabled aria-describedby="pmu-reason">
            <legend id="pmu-reason" className="muted">
              Hardware metrics unavailable: {pmuReason}
            </legend>
            {METRICS.filter((m) => m.hardware).map((m) => (
              <label key={m.id} className="muted">
                <input type="checkbox" disabled checked={false} aria-label={m.label} readOnly />
                {m.label}
              </label>
            ))}
          </fieldset>
        )}
      </fieldset>
      <button type="button" disabled={picked.length === 0 || metrics.size === 0 || start.isPending} onClick={onStart}>
        Start
      </button>
      {error && (
        <p className="error small" role="alert">
          {error}
        </p>
      )}
      <CommandStatus hostId={hostId} id={command} what="Start" />
    </section>
  );
}

function MeasurementList({
  hostId,
  target,
  current,
  onOpen,
}: {
  hostId: string;
  target: string;
  current: string | null;
  onOpen: (id: string) => void;
}) {
  const list = useMeasurements(hostId);
  const mine = (list.data ?? []).filter((m) => m.target_id === target);
  if (mine.length === 0) return null;
  return (
    <section aria-labelledby="m-list-title">
      <h2 id="m-list-title">Measurements of this target</h2>
      <ul className="measurement-list">
        {mine.map((m) => (
          <li key={m.id}>
            <button type="button" className="link" aria-current={m.id === current} onClick={() => onOpen(m.id)}>
              {m.metrics.join(", ")} · {m.resource_count} rows · {m.state}
            </button>
          </li>
        ))}
      </ul>
    </section>
  );
}

function MeasurementView({ hostId, mid }: { hostId: string; mid: string }) {
  const detail = useMeasurement(hostId, mid);
  const [paused, setPaused] = useState(false);
  const [chartMetric, setChartMetric] = useState<"count" | "wall" | "vtime">("count");
  const [stopCommand, setStopCommand] = useState<string | null>(null);
  const stop = useStopMeasurement(hostId);
  const d: MeasurementDetail | undefined = detail.data;
  const ended = d ? ENDED.has(d.state) : false;
  const live = !paused;
  const values = useMeasurementValues(hostId, mid, WINDOW_S, live);
  const shown = useMemo(() => (d?.resources ?? []).slice(0, 16).map((r) => r.index), [d]);
  const series = useMeasurementSeries(hostId, mid, WINDOW_S, shown, live);
  const names = useMemo(() => resourceNames(d?.resources ?? []), [d]);
  const columns = useMemo(() => splitColumns(d?.resources ?? [], (d?.metrics ?? []) as MetricId[]), [d]);
  const metrics = columns.shown;
  const rows = useMemo(() => tableRows(d?.resources ?? [], metrics, values.data), [d, metrics, values.data]);
  // Function rows measured with their blocks open their CFG with the measurement overlay.
  const cfgLinks = useMemo(() => {
    const res = d?.resources ?? [];
    const withBlocks = new Set(
      res.filter((r) => r.kind === "block" && r.function_row !== null).map((r) => r.function_row),
    );
    return new Map(
      res
        .filter((r) => r.kind === "function" && withBlocks.has(r.index) && r.function_id != null)
        .map((r) => [r.index, r.function_id as number]),
    );
  }, [d]);
  if (detail.isError)
    return (
      <p className="error" role="alert">
        Measurement unavailable: {detail.error.message}
      </p>
    );
  if (!d) return <p className="muted">Loading measurement…</p>;
  return (
    <section className="measurement" aria-labelledby="m-title" data-measurement={mid}>
      <div className="page-head">
        <h2 id="m-title">Measurement</h2>
        <span className={`pill state-${d.state}`} aria-label="Measurement state">
          {d.state}
        </span>
        {d.detail && <span className="muted small">{d.detail}</span>}
        <button type="button" onClick={() => setPaused((p) => !p)} aria-pressed={paused}>
          {paused ? "Resume" : "Pause"}
        </button>
        {!ended && (
          <button
            type="button"
            disabled={stop.isPending}
            onClick={() => stop.mutate(mid, { onSuccess: (c) => setStopCommand(c.id) })}
          >
            Stop
          </button>
        )}
      </div>
      <CommandStatus hostId={hostId} id={stopCommand} what="Stop" />
      <p className="muted small">
        Last {WINDOW_S} s of the measurement:{" "}
        {values.data
          ? `${values.data.measured_seconds.toFixed(1)} s measured in ${values.data.intervals} intervals`
          : "…"}
      </p>
      {columns.unavailable.length > 0 && (
        <ul className="unavailable-metrics" aria-label="Metrics not measured">
          {columns.unavailable.map((u) => (
            <li key={u.metric}>
              <strong>{METRICS.find((x) => x.id === u.metric)?.label ?? u.metric}</strong>: unavailable — {u.reason}
            </li>
          ))}
        </ul>
      )}
      <table className="data measure-table" aria-label="Measured values">
        <thead>
          <tr>
            <th>Resource</th>
            {metrics.map((m) => (
              <th key={m}>{METRICS.find((x) => x.id === m)?.label ?? m}</th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={r.index} data-resource={r.name} className={r.kind === "block" ? "block-row" : undefined}>
              <th scope="row">
                {r.name} <span className="muted small">{r.address}</span>
                {cfgLinks.get(r.index) !== undefined && (
                  <>
                    {" "}
                    <Link
                      className="small"
                      aria-label={`CFG of ${r.name}`}
                      to={`/hosts/${encodeURIComponent(hostId)}/functions/${cfgLinks.get(r.index)}?measurement=${encodeURIComponent(mid)}&row=${r.index}&target=${encodeURIComponent(d.target_id)}`}
                    >
                      CFG
                    </Link>
                  </>
                )}
              </th>
              {metrics.map((m) => {
                const c = r.cells[m];
                if (!c) return <td key={m} />;
                return (
                  <td key={m} data-metric={m} title={c.unavailable ?? undefined}>
                    <span className="value">{c.text}</span>
                    {c.detail && <span className="muted small"> · {c.detail}</span>}
                    {c.label && <span className={`label label-${c.label}`}> {c.label}</span>}
                    {c.unavailable && c.text === "unavailable" && c.unavailable !== c.text && (
                      <span className="muted small"> ({c.unavailable})</span>
                    )}
                  </td>
                );
              })}
            </tr>
          ))}
        </tbody>
      </table>
      <div className="toolbar">
        <label>
          Chart{" "}
          <select
            value={chartMetric}
            onChange={(e) => setChartMetric(e.target.value as "count" | "wall" | "vtime")}
            aria-label="Chart metric"
          >
            <option value="count">count per second</option>
            <option value="wall">wall time per second</option>
            <option value="vtime">virtual time per second</option>
          </select>
        </label>
      </div>
      <MeasureChart series={series.data} names={names} metric={chartMetric} />
    </section>
  );
}
