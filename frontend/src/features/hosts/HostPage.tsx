// SPDX-License-Identifier: Apache-2.0
// One host: its description and two tabs, the code-resource tree and the top functions. The
// selected tab is kept in the URL (?tab=) so it survives reloads and links.
import { useRef, type KeyboardEvent } from "react";
import { Link, useParams, useSearchParams } from "react-router-dom";
import { ApiError } from "../../api/client";
import { useHost } from "../../api/queries";
import { CodeTree } from "../tree/CodeTree";
import { TopFunctionsView } from "../top/TopFunctionsView";
import { GapStrip } from "./GapStrip";
import { CatalogStatus, HostFlags, HostStatus, L1iGeometry, Sampling } from "./hostParts";
import { HostAdminActions } from "../admin/HostAdminActions";

const TABS = [
  { id: "code", label: "Code" },
  { id: "top", label: "Top functions" },
] as const;
type TabId = (typeof TABS)[number]["id"];

export function HostPage() {
  const { hostId = "" } = useParams();
  const host = useHost(hostId);
  const [params, setParams] = useSearchParams();
  const tab: TabId = params.get("tab") === "top" ? "top" : "code";
  const tabRefs = useRef<(HTMLButtonElement | null)[]>([]);

  const select = (id: TabId) => {
    const next = new URLSearchParams(params);
    next.set("tab", id);
    setParams(next, { replace: true });
  };
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
        {!notFound && <p className="error" role="alert">{host.error.message}</p>}
        <p><Link to="/">Back to the host list</Link></p>
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
        <div><dt>Kernel</dt><dd>{h.kernel_release}</dd></div>
        <div><dt>CPU</dt><dd>{h.cpu_model} × {h.cpu_count}</dd></div>
        <div><dt>L1i</dt><dd><L1iGeometry host={h} /></dd></div>
        <div><dt>Sampling</dt><dd><Sampling host={h} /></dd></div>
        <div><dt>Catalog</dt><dd><CatalogStatus host={h} /></dd></div>
        <div><dt>Stream</dt><dd>{h.replica ? `held by ${h.replica}` : "never connected"}</dd></div>
      </dl>
      <GapStrip hostId={h.id} />
      <div role="tablist" aria-label="Host views" className="tabs">
        {TABS.map((t, i) => (
          <button
            key={t.id}
            ref={(el) => { tabRefs.current[i] = el; }}
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
        {tab === "code" ? <CodeTree host={h} /> : <TopFunctionsView hostId={h.id} />}
      </div>
    </section>
  );
}
