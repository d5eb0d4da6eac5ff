// SPDX-License-Identifier: Apache-2.0
// The code-resource tree of a whole kernel: modules → functions → basic blocks. The catalog is
// fetched once and kept in memory; search and sort run locally on every keystroke, and only the
// rows in view are rendered, so scrolling 100k+ functions stays instant. Expanding a function
// loads its blocks (and their recent samples) on demand.
import { useDeferredValue, useEffect, useMemo, useRef, useState, type KeyboardEvent } from "react";
import { Link } from "react-router-dom";
import { useQueries, useQueryClient } from "@tanstack/react-query";
import { useVirtualizer } from "@tanstack/react-virtual";
import { api, unwrap } from "../../api/client";
import { keys, useCatalog, useHotness } from "../../api/queries";
import type { Host } from "../../api/types";
import { formatAddress } from "../../lib/address";
import { formatBytes, formatCount, formatRate } from "../../lib/format";
import { blockAddressHex, blockSamplesMap } from "../functions/cfgModel";
import { flattenTree, hotnessMap, indexCatalog, type BlockState, type SortKey, type TreeRow } from "./treeModel";

const ROW_HEIGHT = 26;
const HOTNESS_WINDOW_S = 10;

export function CodeTree({ host }: { host: Host }) {
  const hostId = host.id;
  const qc = useQueryClient();
  const catalog = useCatalog(hostId);
  const hotness = useHotness(hostId, HOTNESS_WINDOW_S);
  const [query, setQuery] = useState("");
  const deferredQuery = useDeferredValue(query);
  const [sort, setSort] = useState<SortKey>("name");
  const [collapsed, setCollapsed] = useState<ReadonlySet<string>>(new Set());
  const [expanded, setExpanded] = useState<ReadonlySet<number>>(new Set());
  const [active, setActive] = useState(0);
  const scrollRef = useRef<HTMLDivElement>(null);

  // The catalog may still be arriving from the agent; fetch it again once it is complete.
  const complete = host.catalog_complete;
  useEffect(() => {
    if (complete) void qc.invalidateQueries({ queryKey: keys.catalog(hostId) });
  }, [complete, hostId, qc]);

  const index = useMemo(() => indexCatalog(catalog.data?.items ?? []), [catalog.data]);
  const hot = useMemo(() => (hotness.data ? hotnessMap(hotness.data.items) : null), [hotness.data]);

  const expandedIds = useMemo(() => [...expanded], [expanded]);
  const details = useQueries({
    queries: expandedIds.map((fid) => ({
      queryKey: keys.fn(hostId, fid),
      queryFn: () => unwrap(api.GET("/api/v1/hosts/{host_id}/functions/{function_id}", {
        params: { path: { host_id: hostId, function_id: fid } },
      })),
      staleTime: Infinity,
      retry: false,
    })),
  });
  const samples = useQueries({
    queries: expandedIds.map((fid) => ({
      queryKey: keys.samples(hostId, fid, HOTNESS_WINDOW_S),
      queryFn: () => unwrap(api.GET("/api/v1/hosts/{host_id}/functions/{function_id}/samples", {
        params: { path: { host_id: hostId, function_id: fid }, query: { window_s: HOTNESS_WINDOW_S } },
      })),
      retry: false,
    })),
  });
  const resultsVersion = [...details, ...samples].map((q) => `${q.dataUpdatedAt}:${q.errorUpdatedAt}`).join(",");
  const blocks = useMemo(() => {
    const m = new Map<number, BlockState>();
    expandedIds.forEach((fid, i) => {
      const d = details[i];
      const s = samples[i];
      if (d?.data) m.set(fid, { status: "ready", blocks: d.data.blocks, samples: s?.data ? blockSamplesMap(s.data.blocks) : null });
      else if (d?.error) m.set(fid, { status: "error", message: d.error.message });
      else m.set(fid, { status: "loading" });
    });
    return m;
    // The query results are new arrays every render; their update times say when data changed.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [expandedIds, resultsVersion]);

  const rows = useMemo(
    () => flattenTree(index, { query: deferredQuery, sort, hotness: hot, collapsedModules: collapsed, expandedFunctions: expanded, blocks }),
    [index, deferredQuery, sort, hot, collapsed, expanded, blocks],
  );

  const virtualizer = useVirtualizer({
    count: rows.length,
    getScrollElement: () => scrollRef.current,
    estimateSize: () => ROW_HEIGHT,
    overscan: 16,
    initialRect: { width: 800, height: 600 },
  });

  const activeIndex = Math.min(active, Math.max(0, rows.length - 1));
  const activeRow = rows[activeIndex];

  const toggle = (row: TreeRow, open?: boolean) => {
    if (row.kind === "module") {
      setCollapsed((prev) => {
        const next = new Set(prev);
        const isOpen = !prev.has(row.name);
        if (open ?? !isOpen) next.delete(row.name);
        else next.add(row.name);
        return next;
      });
    } else if (row.kind === "function") {
      setExpanded((prev) => {
        const next = new Set(prev);
        const isOpen = prev.has(row.fn.id);
        if (open ?? !isOpen) next.add(row.fn.id);
        else next.delete(row.fn.id);
        return next;
      });
    }
  };

  const moveTo = (i: number) => {
    const j = Math.max(0, Math.min(rows.length - 1, i));
    setActive(j);
    virtualizer.scrollToIndex(j, { align: "auto" });
  };

  const onKeyDown = (e: KeyboardEvent<HTMLDivElement>) => {
    if (!activeRow) return;
    const expandable = activeRow.kind === "module" || activeRow.kind === "function";
    const isOpen = activeRow.kind === "module" || activeRow.kind === "function" ? activeRow.expanded : false;
    switch (e.key) {
      case "ArrowDown": moveTo(activeIndex + 1); break;
      case "ArrowUp": moveTo(activeIndex - 1); break;
      case "Home": moveTo(0); break;
      case "End": moveTo(rows.length - 1); break;
      case "PageDown": moveTo(activeIndex + 20); break;
      case "PageUp": moveTo(activeIndex - 20); break;
      case "ArrowRight":
        if (expandable && !isOpen) toggle(activeRow, true);
        else moveTo(activeIndex + 1);
        break;
      case "ArrowLeft":
        if (expandable && isOpen) toggle(activeRow, false);
        else {
          // Go to the parent: the nearest row above with a lower level.
          for (let i = activeIndex - 1; i >= 0; i--) if (rows[i].level < activeRow.level) { moveTo(i); break; }
        }
        break;
      case "Enter":
        if (activeRow.kind === "function") {
          const link = scrollRef.current?.querySelector<HTMLAnchorElement>(`#${rowId(activeRow)} a`);
          link?.click();
        } else if (expandable) toggle(activeRow);
        break;
      default:
        return;
    }
    e.preventDefault();
  };

  const total = catalog.data?.total ?? 0;
  const loaded = catalog.data?.items.length ?? 0;
  const fnRows = rows.reduce((n, r) => n + (r.kind === "function" ? 1 : 0), 0);

  return (
    <div className="code-tree">
      <div className="toolbar">
        <input
          type="search"
          aria-label="Search functions"
          placeholder="Search functions"
          value={query}
          onChange={(e) => { setQuery(e.target.value); setActive(0); }}
          className="search"
        />
        <label className="inline-label">
          Sort by{" "}
          <select value={sort} onChange={(e) => setSort(e.target.value as SortKey)}>
            <option value="name">name</option>
            <option value="address">address</option>
            <option value="hotness">hotness (samples/s)</option>
          </select>
        </label>
        <span className="muted" aria-live="polite">
          {catalog.data
            ? deferredQuery.trim()
              ? `${formatCount(fnRows)} matching functions`
              : `${formatCount(loaded)} functions`
            : ""}
        </span>
        {hotness.isError && <span className="error small">hotness unavailable: {hotness.error.message}</span>}
      </div>
      {catalog.isPending && <p className="muted">Loading the function catalog…</p>}
      {catalog.isError && <p className="error" role="alert">Could not load functions: {catalog.error.message}</p>}
      {catalog.data && !host.catalog_complete && (
        <p className="muted">loading catalog… the agent is still sending it; the tree refreshes when it is complete.</p>
      )}
      {catalog.data && loaded < total && (
        <p className="muted">Showing {formatCount(loaded)} of {formatCount(total)} functions.</p>
      )}
      {catalog.data && (
        <div
          ref={scrollRef}
          className="tree-scroll"
          role="tree"
          aria-label="Code"
          tabIndex={0}
          aria-activedescendant={activeRow ? rowId(activeRow) : undefined}
          onKeyDown={onKeyDown}
        >
          {rows.length === 0 && (
            <p className="muted pad">{deferredQuery.trim() ? `No function matches “${deferredQuery.trim()}”.` : "The catalog is empty."}</p>
          )}
          <div style={{ height: virtualizer.getTotalSize(), position: "relative" }}>
            {virtualizer.getVirtualItems().map((v) => {
              const row = rows[v.index];
              return (
                <TreeRowView
                  key={row.key}
                  row={row}
                  hostId={hostId}
                  top={v.start}
                  active={v.index === activeIndex}
                  onToggle={() => toggle(row)}
                  onSelect={() => setActive(v.index)}
                />
              );
            })}
          </div>
        </div>
      )}
    </div>
  );
}

function rowId(row: TreeRow): string {
  return `tree-${row.key.replace(/[^a-zA-Z0-9_-]/g, "_")}`;
}

interface RowProps {
  row: TreeRow;
  hostId: string;
  top: number;
  active: boolean;
  onToggle: () => void;
  onSelect: () => void;
}

function TreeRowView({ row, hostId, top, active, onToggle, onSelect }: RowProps) {
  const expandable = row.kind === "module" || row.kind === "function";
  const expandedAttr = expandable ? row.expanded : undefined;
  return (
    <div
      id={rowId(row)}
      role="treeitem"
      aria-level={row.level}
      aria-posinset={row.posinset}
      aria-setsize={row.setsize}
      aria-expanded={expandedAttr}
      aria-selected={active}
      className={`tree-row level-${row.level}${active ? " active" : ""}`}
      style={{ transform: `translateY(${top}px)`, height: ROW_HEIGHT }}
      onClick={onSelect}
    >
      <span
        className="twisty"
        aria-hidden="true"
        onClick={expandable ? (e) => { e.stopPropagation(); onSelect(); onToggle(); } : undefined}
      >
        {expandable ? (row.expanded ? "▾" : "▸") : ""}
      </span>
      {" "}<RowContent row={row} hostId={hostId} />
    </div>
  );
}

function RowContent({ row, hostId }: { row: TreeRow; hostId: string }) {
  switch (row.kind) {
    case "module":
      return (
        <>
          <span className="mod-name">{row.name}</span>
          {" "}<span className="muted">{row.shown === row.total ? `${formatCount(row.total)} functions` : `${formatCount(row.shown)} of ${formatCount(row.total)} functions`}</span>
        </>
      );
    case "function": {
      const fn = row.fn;
      return (
        <>
          <Link className="fn-name" to={`/hosts/${encodeURIComponent(hostId)}/functions/${fn.id}`}>{fn.name}</Link>
          {" "}<span className="cell addr">{formatAddress(fn.address_hex, fn.address)}</span>
          {" "}<span className="cell">{formatBytes(fn.size)}</span>
          {" "}<span className="cell">{fn.block_count} blocks</span>
          {" "}<span className="cell rate">
            {row.samplesPerSec === null
              ? <span className="unavailable" title="no sample data from this host">unavailable</span>
              : formatRate(row.samplesPerSec)}
          </span>
          {" "}{fn.undecodable && <span className="badge" title="the agent could not decode all of this function's bytes">undecodable</span>}
        </>
      );
    }
    case "block": {
      const hex = blockAddressHex(null, row.block);
      return (
        <>
          {" "}<span className="cell addr">{formatAddress(hex, row.block.address)}</span>
          {" "}<span className="cell">size {row.block.size}</span>
          {" "}<span className="cell">{row.block.instruction_count} instructions</span>
          {" "}<span className="cell rate">{row.samples === null ? "samples unavailable" : `${formatCount(row.samples)} samples`}</span>
        </>
      );
    }
    case "status":
      return <span className={row.error ? "error" : "muted"}>{row.text}</span>;
  }
}
