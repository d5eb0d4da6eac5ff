// SPDX-License-Identifier: Apache-2.0
// The code-resource tree of a whole kernel: modules → functions → basic blocks. The catalog comes as
// content-addressed pieces (one per module, cached by the browser for good), is indexed once, and is
// searched (substring, glob, /regex/ or an address) and sorted locally on every keystroke; only the
// rows in view are rendered, so scrolling 100k+ functions stays instant. Generated stubs (static-call
// trampolines, tracepoint stubs, thunks) sit in collapsed groups. Hotness is samples per second over
// the host page's time range. Search, sort, the hot-only filter and the functions ticked for
// measurement (kperfmon's multi-select of resources) are in the URL; "Measure selected" opens the
// kernel's measure page with them picked.
import { useDeferredValue, useMemo, useRef, useState, type KeyboardEvent } from "react";
import { Link, useNavigate } from "react-router-dom";
import { useQueries } from "@tanstack/react-query";
import { useVirtualizer } from "@tanstack/react-virtual";
import {
  functionDetailQuery,
  functionSamplesQuery,
  useCatalogPieces,
  useHotness,
  useInstalledPlans,
} from "../../api/queries";
import type { Host } from "../../api/types";
import { formatAddress } from "../../lib/address";
import { formatBytes, formatCount, formatRate } from "../../lib/format";
import type { TimeRange } from "../../lib/timeRange";
import { MAX_PICKED, measureLink, rangeSearch, type HostView, type TreeSort } from "../../lib/urlState";
import { blockAddressHex, blockSamplesMap } from "../../shared/cfg/cfgModel";
import { InstalledCopyBadge } from "../../shared/InstalledCopyBadge";
import { installedCopies, installedCopyOf, type InstalledCopies } from "../../shared/installedCopies";
import {
  compileQuery,
  flattenTree,
  hotnessMap,
  indexCatalog,
  summariesFromPieces,
  type BlockState,
  type SortKey,
  type TreeRow,
} from "./treeModel";

const ROW_HEIGHT = 26;

const COLUMNS: { key: TreeSort; label: string; unit: string; className: string }[] = [
  { key: "name", label: "Function", unit: "", className: "col-name" },
  { key: "address", label: "Address", unit: "hex", className: "col-addr" },
  { key: "size", label: "Size", unit: "bytes", className: "col-size" },
  { key: "blocks", label: "Blocks", unit: "count", className: "col-blocks" },
  { key: "hotness", label: "Hotness", unit: "samples/s", className: "col-rate" },
];

export interface CodeTreeProps {
  host: Host;
  view: HostView;
  update: (patch: Partial<HostView>, options?: { push?: boolean }) => void;
  live: boolean;
}

export function CodeTree({ host, view, update, live }: CodeTreeProps) {
  const hostId = host.id;
  const range: TimeRange = view.range;
  const { modules, complete: completeModules, pieces } = useCatalogPieces(hostId);
  const hotness = useHotness(hostId, range, live);
  const query = view.q;
  const deferredQuery = useDeferredValue(query);
  const sort: SortKey = view.treeSort;
  const [collapsed, setCollapsed] = useState<ReadonlySet<string>>(new Set());
  const [expanded, setExpanded] = useState<ReadonlySet<number>>(new Set());
  const [openGroups, setOpenGroups] = useState<ReadonlySet<string>>(new Set());
  const [active, setActive] = useState(0);
  const scrollRef = useRef<HTMLDivElement>(null);
  const navigate = useNavigate();
  const picked = useMemo(() => new Set(view.picked), [view.picked]);
  const togglePick = (id: number) => {
    const next = picked.has(id) ? view.picked.filter((x) => x !== id) : [...view.picked, id].slice(0, MAX_PICKED);
    update({ picked: next }, { push: false });
  };

  const piecesVersion = pieces.map((p) => p.dataUpdatedAt).join(",");
  const allLoaded = pieces.length > 0 && pieces.every((p) => p.data);
  const index = useMemo(() => {
    const bases = new Map((modules.data ?? []).map((m) => [m.name, m.base_address_hex]));
    const loaded = pieces.flatMap((p) => (p.data ? [p.data] : []));
    return indexCatalog(summariesFromPieces(loaded, bases));
    // The query results are new arrays every render; their update times say when data changed.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [modules.data, piecesVersion]);
  const hot = useMemo(() => (hotness.data ? hotnessMap(hotness.data.items) : null), [hotness.data]);
  const installed = useInstalledPlans(hostId);
  const copies = useMemo(() => installedCopies(installed.data), [installed.data]);

  const expandedIds = useMemo(() => [...expanded], [expanded]);
  const details = useQueries({
    queries: expandedIds.map((fid) => ({ ...functionDetailQuery(hostId, fid), retry: false })),
  });
  const samples = useQueries({
    queries: expandedIds.map((fid) => ({ ...functionSamplesQuery(hostId, fid, range, live), retry: false })),
  });
  const resultsVersion = [...details, ...samples].map((q) => `${q.dataUpdatedAt}:${q.errorUpdatedAt}`).join(",");
  const blocks = useMemo(() => {
    const m = new Map<number, BlockState>();
    expandedIds.forEach((fid, i) => {
      const d = details[i];
      const s = samples[i];
      if (d?.data)
        m.set(fid, {
          status: "ready",
          blocks: d.data.blocks,
          samples: s?.data ? blockSamplesMap(s.data.blocks) : null,
        });
      else if (d?.error) m.set(fid, { status: "error", message: d.error.message });
      else m.set(fid, { status: "loading" });
    });
    return m;
    // The query results are new arrays every render; their update times say when data changed.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [expandedIds, resultsVersion]);

  const matcher = useMemo(() => compileQuery(deferredQuery), [deferredQuery]);
  const rows = useMemo(
    () =>
      flattenTree(index, {
        query: deferredQuery,
        sort,
        descending: view.treeDesc,
        hotOnly: view.hotOnly,
        hotness: hot,
        collapsedModules: collapsed,
        expandedFunctions: expanded,
        expandedGroups: openGroups,
        blocks,
      }),
    [index, deferredQuery, sort, view.treeDesc, view.hotOnly, hot, collapsed, expanded, openGroups, blocks],
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
    if (row.kind === "group") {
      const gkey = `${row.module}:${row.group}`;
      setOpenGroups((prev) => {
        const next = new Set(prev);
        if (open ?? !prev.has(gkey)) next.add(gkey);
        else next.delete(gkey);
        return next;
      });
    } else if (row.kind === "module") {
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
    const expandable = activeRow.kind === "module" || activeRow.kind === "function" || activeRow.kind === "group";
    const isOpen =
      activeRow.kind === "module" || activeRow.kind === "function" || activeRow.kind === "group"
        ? activeRow.expanded
        : false;
    switch (e.key) {
      case "ArrowDown":
        moveTo(activeIndex + 1);
        break;
      case "ArrowUp":
        moveTo(activeIndex - 1);
        break;
      case "Home":
        moveTo(0);
        break;
      case "End":
        moveTo(rows.length - 1);
        break;
      case "PageDown":
        moveTo(activeIndex + 20);
        break;
      case "PageUp":
        moveTo(activeIndex - 20);
        break;
      case "ArrowRight":
        if (expandable && !isOpen) toggle(activeRow, true);
        else moveTo(activeIndex + 1);
        break;
      case "ArrowLeft":
        if (expandable && isOpen) toggle(activeRow, false);
        else {
          // Go to the parent: the nearest row above with a lower level.
          for (let i = activeIndex - 1; i >= 0; i--)
            if (rows[i].level < activeRow.level) {
              moveTo(i);
              break;
            }
        }
        break;
      case " ":
        if (activeRow.kind !== "function") return;
        togglePick(activeRow.fn.id);
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

  const total = host.function_count;
  const loaded = index.byName.size ? [...index.byName.values()].reduce((n, l) => n + l.length, 0) : 0;
  const fnRows = rows.reduce((n, r) => n + (r.kind === "function" ? 1 : 0), 0);
  const pieceError = pieces.find((p) => p.error)?.error ?? modules.error;
  const sortBy = (key: TreeSort) => {
    if (key === sort) update({ treeDesc: !view.treeDesc }, { push: true });
    else update({ treeSort: key, treeDesc: key === "hotness" || key === "size" || key === "blocks" }, { push: true });
  };
  const searchHint =
    matcher.kind === "address"
      ? "function holding this address"
      : matcher.kind === "pattern"
        ? `${matcher.source} match`
        : matcher.kind === "invalid"
          ? null
          : null;

  return (
    <div className="code-tree">
      <div className="toolbar">
        <input
          type="search"
          aria-label="Search functions"
          placeholder="name, glob (vfs_*), /regex/ or 0xaddress"
          value={query}
          onChange={(e) => {
            update({ q: e.target.value }, { push: false });
            setActive(0);
          }}
          className="search"
        />
        <label className="inline-label">
          Sort by{" "}
          <select value={sort} onChange={(e) => sortBy(e.target.value as TreeSort)}>
            <option value="hotness">hotness (samples/s)</option>
            <option value="name">name</option>
            <option value="address">address</option>
            <option value="size">size (bytes)</option>
            <option value="blocks">basic blocks</option>
          </select>
        </label>
        <label className="inline-label">
          <input
            type="checkbox"
            checked={view.hotOnly}
            onChange={(e) => update({ hotOnly: e.target.checked }, { push: true })}
          />
          hot only (samples in range)
        </label>
        <span className="muted" aria-live="polite">
          {allLoaded
            ? deferredQuery.trim() || view.hotOnly
              ? `${formatCount(fnRows)} matching functions${searchHint ? ` (${searchHint})` : ""}`
              : `${formatCount(loaded)} functions`
            : ""}
        </span>
        {matcher.kind === "invalid" && (
          <span className="error small" role="alert">
            Not a regular expression: {matcher.message}
          </span>
        )}
        {hotness.isError && <span className="error small">hotness unavailable: {hotness.error.message}</span>}
      </div>
      {view.picked.length > 0 && (
        <div className="toolbar selection-bar" role="region" aria-label="Selected functions">
          <span aria-live="polite">{formatCount(view.picked.length)} selected</span>
          <button type="button" onClick={() => navigate(measureLink(hostId, "kernel", view.picked))}>
            Measure selected
          </button>
          <button type="button" onClick={() => update({ picked: [] }, { push: true })}>
            Clear
          </button>
          {view.picked.length >= MAX_PICKED && (
            <span className="muted small">at most {MAX_PICKED} functions per selection</span>
          )}
        </div>
      )}
      {(modules.isPending || (completeModules.length > 0 && !allLoaded && !pieceError)) && (
        <p className="muted">Loading the function catalog…</p>
      )}
      {pieceError && (
        <p className="error" role="alert">
          Could not load functions: {pieceError.message}
        </p>
      )}
      {modules.data && !host.catalog_complete && (
        <p className="muted">loading catalog… the agent is still sending it; the tree refreshes when it is complete.</p>
      )}
      {allLoaded && host.catalog_complete && loaded < total && (
        <p className="muted">
          Showing {formatCount(loaded)} of {formatCount(total)} functions.
        </p>
      )}
      {(allLoaded || (modules.data && completeModules.length === 0)) && (
        <>
          <div className="tree-head" role="presentation">
            <span className="twisty" />
            <span className="pick" aria-hidden="true" />
            {COLUMNS.map((c) => (
              <button
                key={c.key}
                type="button"
                className={`col ${c.className}`}
                onClick={() => sortBy(c.key)}
                aria-label={`Sort by ${c.label.toLowerCase()}`}
                aria-pressed={sort === c.key}
              >
                {c.label}
                {c.unit && <span className="unit"> ({c.key === "hotness" ? c.unit : c.unit})</span>}
                {sort === c.key ? (view.treeDesc ? " ▼" : " ▲") : ""}
              </button>
            ))}
          </div>
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
              <p className="muted pad">
                {deferredQuery.trim()
                  ? `No function matches “${deferredQuery.trim()}”.`
                  : view.hotOnly
                    ? "No function has samples in this range."
                    : "The catalog is empty."}
              </p>
            )}
            <div style={{ height: virtualizer.getTotalSize(), position: "relative" }}>
              {virtualizer.getVirtualItems().map((v) => {
                const row = rows[v.index];
                return (
                  <TreeRowView
                    key={row.key}
                    row={row}
                    hostId={hostId}
                    range={range}
                    copies={copies}
                    picked={row.kind === "function" && picked.has(row.fn.id)}
                    onPick={togglePick}
                    top={v.start}
                    active={v.index === activeIndex}
                    onToggle={() => toggle(row)}
                    onSelect={() => setActive(v.index)}
                  />
                );
              })}
            </div>
          </div>
        </>
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
  range: TimeRange;
  copies: InstalledCopies;
  picked: boolean;
  onPick: (functionId: number) => void;
  top: number;
  active: boolean;
  onToggle: () => void;
  onSelect: () => void;
}

function TreeRowView({ row, hostId, range, copies, picked, onPick, top, active, onToggle, onSelect }: RowProps) {
  const expandable = row.kind === "module" || row.kind === "function" || row.kind === "group";
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
        onClick={
          expandable
            ? (e) => {
                e.stopPropagation();
                onSelect();
                onToggle();
              }
            : undefined
        }
      >
        {expandable ? (row.expanded ? "▾" : "▸") : ""}
      </span>
      {row.kind === "function" && (
        <input
          type="checkbox"
          className="pick"
          checked={picked}
          aria-label={`Select ${row.fn.name} for measurement`}
          onChange={() => onPick(row.fn.id)}
          onClick={(e) => e.stopPropagation()}
          onKeyDown={(e) => e.stopPropagation()}
        />
      )}{" "}
      <RowContent row={row} hostId={hostId} range={range} copies={copies} />
    </div>
  );
}

function RowContent({
  row,
  hostId,
  range,
  copies,
}: {
  row: TreeRow;
  hostId: string;
  range: TimeRange;
  copies: InstalledCopies;
}) {
  switch (row.kind) {
    case "group":
      return (
        <>
          <span className="group-name">{row.label}</span> <span className="muted">{formatCount(row.count)} stubs</span>{" "}
          <span className="cell rate">{row.samplesPerSec === null ? "" : formatRate(row.samplesPerSec)}</span>
        </>
      );
    case "module":
      return (
        <>
          <span className="mod-name">{row.name}</span>{" "}
          <span className="muted">
            {row.shown === row.total
              ? `${formatCount(row.total)} functions`
              : `${formatCount(row.shown)} of ${formatCount(row.total)} functions`}
          </span>
        </>
      );
    case "function": {
      const fn = row.fn;
      const copy = installedCopyOf(copies, fn);
      return (
        <>
          <Link
            className="fn-name"
            to={`/hosts/${encodeURIComponent(hostId)}/functions/${fn.id}?${rangeSearch(range)}`}
          >
            {fn.name}
          </Link>{" "}
          <span className="cell addr">{formatAddress(fn.address_hex, fn.address)}</span>{" "}
          <span className="cell size" title={`${fn.size} bytes`}>
            {formatBytes(fn.size)}
          </span>{" "}
          <span className="cell blocks">{fn.block_count} blocks</span>{" "}
          <span className="cell rate">
            {row.samplesPerSec === null ? (
              <span className="unavailable" title="no sample data from this host">
                unavailable
              </span>
            ) : (
              formatRate(row.samplesPerSec)
            )}
          </span>{" "}
          {fn.undecodable && (
            <span className="badge" title="the agent could not decode all of this function's bytes">
              undecodable
            </span>
          )}
          {copy && (
            <>
              {" "}
              <InstalledCopyBadge hostId={hostId} plan={copy} />
            </>
          )}
        </>
      );
    }
    case "block": {
      const hex = blockAddressHex(null, row.block);
      return (
        <>
          {" "}
          <span className="cell addr">{formatAddress(hex, row.block.address)}</span>{" "}
          <span className="cell">size {row.block.size}</span>{" "}
          <span className="cell">{row.block.instruction_count} instructions</span>{" "}
          <span className="cell rate">
            {row.samples === null ? "samples unavailable" : `${formatCount(row.samples)} samples`}
          </span>
        </>
      );
    }
    case "status":
      return <span className={row.error ? "error" : "muted"}>{row.text}</span>;
  }
}
