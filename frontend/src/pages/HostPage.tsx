// SPDX-License-Identifier: Apache-2.0
// One host: its description, the time range every view of it uses (with a chart of the host's
// samples over time to brush a range from, and pause/resume of live updates), and five tabs: the
// code-resource tree, the top functions, the flame graph, a comparison of two ranges, and the layout
// candidates (what re-layout could gain); then its measurement targets. Everything is in the URL.
import { useCallback, useRef, type KeyboardEvent } from "react";
import { Link, useParams } from "react-router-dom";
import { ApiError } from "../api/client";
import { useHost, useTimeline } from "../api/queries";
import { readHostView, useUrlView, writeHostView, type HostTab } from "../lib/urlState";
import { CodeTree } from "../features/tree/CodeTree";
import { TopFunctionsView } from "../features/top/TopFunctionsView";
import { CompareView } from "../features/compare/CompareView";
import { DiffFlameView } from "../features/flame/DiffFlameView";
import { FlameView } from "../features/flame/FlameView";
import { LiveBar } from "../shared/LiveBar";
import { TimeRangePicker } from "../shared/TimeRangePicker";
import { TimelineChart } from "../features/time/TimelineChart";
import { GapStrip } from "../features/hosts/GapStrip";
import { CatalogStatus, HostFlags, HostStatus, L1iGeometry, Sampling } from "../shared/hostParts";
import { HostLabels } from "../features/fleet/HostLabels";
import { useIsAdmin } from "../features/admin/useIsAdmin";
import { HostAdminActions } from "../features/admin/HostAdminActions";
import { TargetsPanel } from "../features/measure/TargetsPanel";
import { LayoutCandidates } from "../shared/layout/LayoutCandidates";
import { useLiveTopics } from "../api/live";

const TABS: { id: HostTab; label: string }[] = [
  { id: "code", label: "Code" },
  { id: "top", label: "Top functions" },
  { id: "flame", label: "Flame graph" },
  { id: "compare", label: "Compare" },
  { id: "layout", label: "Layout candidates" },
];
type TabId = HostTab;

export function HostPage() {
  const { hostId = "" } = useParams();
  const host = useHost(hostId);
  const isAdmin = useIsAdmin();
  useLiveTopics([`host:${hostId}`]);
  const [view, update] = useUrlView(readHostView, writeHostView);
  const tab: TabId = view.tab;
  const tabRefs = useRef<(HTMLButtonElement | null)[]>([]);
  const live = view.range.kind === "relative" && !view.paused;
  const timeline = useTimeline(hostId, view.range, live);
  const onBrush = useCallback(
    (from: Date, to: Date) => update({ range: { kind: "absolute", from, to }, page: 1 }, { push: true }),
    [update],
  );

  const select = (id: TabId) => update({ tab: id }, { push: true });
  const onKey = (e: KeyboardEvent, i: number) => {
    const delta = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
    if (!delta) return;
    const j = (i + delta + TABS.length) % TABS.length;
    select(TABS[j].id);
    tabRefs.current[j]?.focus();
  };

  if (host.isError) {
    const notFound = host.error instanceof ApiError && host.error.status === 404;
    return (
      <section className="notice">
        <h1>{notFound ? "Host not found" : "Could not load host"}</h1>
        {!notFound && (
          <p className="error" role="alert">
            {host.error.message}
          </p>
        )}
        <p>
          <Link to="/">Back to the host list</Link>
        </p>
      </section>
    );
  }
  if (!host.data) return <p className="muted">Loading host…</p>;
  const h = host.data;

  return (
    <section className="host-page">
      <div className="page-head">
        <h1>{h.hostname}</h1>
        <HostStatus host={h} />
        <HostFlags host={h} />
        <HostAdminActions host={h} />
      </div>
      <dl className="facts">
        <div>
          <dt>Labels</dt>
          <dd>
            <HostLabels host={h} canEdit={isAdmin} />
          </dd>
        </div>
        <div>
          <dt>Kernel</dt>
          <dd>{h.kernel_release}</dd>
        </div>
        <div>
          <dt>CPU</dt>
          <dd>
            {h.cpu_model} × {h.cpu_count}
          </dd>
        </div>
        <div>
          <dt>L1i</dt>
          <dd>
            <L1iGeometry host={h} />
          </dd>
        </div>
        <div>
          <dt>Sampling</dt>
          <dd>
            <Sampling host={h} />
          </dd>
        </div>
        <div>
          <dt>Catalog</dt>
          <dd>
            <CatalogStatus host={h} />
          </dd>
        </div>
        <div>
          <dt>Stream</dt>
          <dd data-testid="host-stream">{streamText(h)}</dd>
        </div>
      </dl>
      <div className="toolbar range-bar">
        <TimeRangePicker range={view.range} onChange={(range) => update({ range, page: 1 }, { push: true })} />
        <LiveBar
          range={view.range}
          paused={view.paused}
          onPause={(paused) => update({ paused }, { push: false })}
          updatedAt={timeline.dataUpdatedAt}
          fetching={timeline.isFetching}
        />
      </div>
      <TimelineChart data={timeline.data} onBrush={onBrush} />
      {timeline.isError && (
        <p className="error small" role="alert">
          Samples over time unavailable: {timeline.error.message}
        </p>
      )}
      <GapStrip hostId={h.id} />
      <div role="tablist" aria-label="Host views" className="tabs">
        {TABS.map((t, i) => (
          <button
            key={t.id}
            ref={(el) => {
              tabRefs.current[i] = el;
            }}
            type="button"
            role="tab"
            id={`tab-${t.id}`}
            aria-selected={tab === t.id}
            aria-controls={`panel-${t.id}`}
            tabIndex={tab === t.id ? 0 : -1}
            onClick={() => select(t.id)}
            onKeyDown={(e) => onKey(e, i)}
          >
            {t.label}
          </button>
        ))}
      </div>
      <div role="tabpanel" id={`panel-${tab}`} aria-labelledby={`tab-${tab}`} className="tabpanel">
        {tab === "code" && <CodeTree host={h} view={view} update={update} live={live} />}
        {tab === "top" && <TopFunctionsView hostId={h.id} view={view} update={update} live={live} />}
        {tab === "flame" && <FlameView hostId={h.id} view={view} update={update} live={live} />}
        {tab === "compare" && (
          <CompareView
            hostId={h.id}
            view={view}
            update={update}
            diffFlame={(d) => <DiffFlameView hostId={h.id} view={view} update={update} {...d} />}
          />
        )}
        {tab === "layout" && <LayoutCandidates hostId={h.id} target="kernel" range={view.range} live={live} />}
      </div>
      {/* Below the views, so the code tree and the tables start near the top of the page. */}
      <TargetsPanel hostId={h.id} />
    </section>
  );
}

/** Who holds the host's agent stream: only an online host's stream is held by a replica. */
export function streamText(h: { online: boolean; replica?: string | null }): string {
  if (h.online) return h.replica ? `held by ${h.replica}` : "connected";
  return h.replica ? `none: the host is offline (last held by ${h.replica})` : "never connected";
}
