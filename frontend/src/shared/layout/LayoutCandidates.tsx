// SPDX-License-Identifier: Apache-2.0
// "Layout candidates": a target's functions ranked by what re-laying them out could gain (a heuristic
// ranking, not a predicted gain: docs/plans.md, "Which functions to optimize"), with the figures behind
// each rank and a one-line reason; sortable by any figure. "Optimize" on a row asks the host's agent for a
// plan with that function as its root and opens the plan (operators). Used on the host's page (the
// kernel, over the page's time range) and on a process's Measure page (its measured functions).
import { useState } from "react";
import { Link, useNavigate } from "react-router-dom";
import { useLayoutCandidates, useMakePlan, useMe } from "../../api/queries";
import { formatBytes, formatCount } from "../../lib/format";
import { formatRange, type TimeRange } from "../../lib/timeRange";
import { rangeSearch } from "../../lib/urlState";
import { useAuth } from "../AuthContext";
import { figure, layoutRows, percent, sortLayoutRows, type LayoutSort } from "./layoutModel";

const COLUMNS: { key: LayoutSort; label: string; title: string; num?: boolean }[] = [
  { key: "rank", label: "#", title: "The backend's rank: by score, functions that cannot move last", num: true },
  { key: "name", label: "Function", title: "" },
  {
    key: "score",
    label: "Score",
    title: "weight × hot lines × jumps per 64 B × taken share (1 where not measured): a ranking, not a gain",
    num: true,
  },
  {
    key: "weight",
    label: "Weight",
    title: "Share of the host's samples (kernel); a process: share of its measured functions' executed instructions",
    num: true,
  },
  {
    key: "hot_lines",
    label: "Hot lines",
    title: "L1i lines its hot blocks touch (and their share of the L1i)",
    num: true,
  },
  { key: "hot_bytes", label: "Hot bytes", title: "Bytes of its hot blocks", num: true },
  { key: "density", label: "Jumps/64 B", title: "Jumps ending its hot blocks per 64 bytes of hot code", num: true },
  {
    key: "taken",
    label: "Taken",
    title: "Of its jumps' executions, the share that jumped (exact block counts only)",
    num: true,
  },
];

export function LayoutCandidates({
  hostId,
  target,
  range,
  live,
}: {
  hostId: string;
  target: string;
  range: TimeRange;
  live: boolean;
}) {
  const q = useLayoutCandidates(hostId, target, range, live);
  const { session } = useAuth();
  const me = useMe(!!session).data ?? session?.user;
  const allowed = me?.role === "operator" || me?.role === "approver" || me?.role === "admin";
  const make = useMakePlan(hostId);
  const navigate = useNavigate();
  const [sort, setSort] = useState<{ key: LayoutSort; desc: boolean }>({ key: "rank", desc: false });
  const rows = sortLayoutRows(layoutRows(q.data?.items ?? []), sort.key, sort.desc);
  const kernel = target === "kernel";
  const sortBy = (key: LayoutSort) =>
    setSort((s) => (s.key === key ? { key, desc: !s.desc } : { key, desc: key !== "rank" && key !== "name" }));
  const functionLink = (fid: number) =>
    `/hosts/${encodeURIComponent(hostId)}/functions/${fid}?${kernel ? rangeSearch(range) : `target=${encodeURIComponent(target)}`}`;

  return (
    <section className="layout-candidates" aria-labelledby={`layout-title-${target}`}>
      <h2 id={`layout-title-${target}`}>Layout candidates</h2>
      <p className="muted small">
        {kernel
          ? `The most sampled functions in ${formatRange(range)}, `
          : "The functions of this process measured with their blocks (exact counts; a process's samples are not mapped to functions), "}
        ranked by weight × hot L1i lines × jumps per 64 B × taken share: a heuristic ranking, not a predicted gain.
        {q.data?.l1i
          ? ` L1i: ${formatBytes(q.data.l1i.size_bytes)}, ${q.data.l1i.line_bytes}-byte lines.`
          : q.data
            ? " The host reported no L1i geometry."
            : ""}
      </p>
      {q.isError && <p className="error">Could not load layout candidates: {q.error.message}</p>}
      {make.isError && (
        <p className="error" role="alert">
          Could not ask for a plan: {make.error.message}
        </p>
      )}
      <table className="grid layout" aria-label="Layout candidates" aria-busy={q.isFetching}>
        <thead>
          <tr>
            {COLUMNS.map((c) => (
              <th
                key={c.key}
                scope="col"
                className={c.num ? "num" : undefined}
                aria-sort={sort.key === c.key ? (sort.desc ? "descending" : "ascending") : undefined}
              >
                <button type="button" className="th-sort" title={c.title || undefined} onClick={() => sortBy(c.key)}>
                  {c.label}
                  {sort.key === c.key ? (sort.desc ? " ▼" : " ▲") : ""}
                </button>
              </th>
            ))}
            <th scope="col">Why</th>
            <th scope="col">
              <span className="visually-hidden">Optimize</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {q.isPending && !q.isError && (
            <tr>
              <td colSpan={COLUMNS.length + 2} className="muted" role="status">
                Loading…
              </td>
            </tr>
          )}
          {q.data && rows.length === 0 && (
            <tr>
              <td colSpan={COLUMNS.length + 2} className="muted">
                {kernel
                  ? `No non-idle kernel samples in ${formatRange(range)}.`
                  : "No function of this process has been measured with its blocks yet: measure the ones to compare."}
              </td>
            </tr>
          )}
          {rows.map(({ rank, item: f, weight }) => (
            <tr key={f.function_id} className={f.movable ? undefined : "muted"}>
              <td className="num">{rank} </td>
              <td>
                <Link to={functionLink(f.function_id)}>{f.name}</Link>
                {!f.movable && (
                  <span className="badge" title={f.kept?.detail || f.kept?.rule}>
                    cannot move
                  </span>
                )}{" "}
              </td>
              <td className="num">{figure(f.score, 3)} </td>
              <td className="num">{percent(weight, 2)} </td>
              <td className="num" title={f.l1i_share === null ? f.unavailable.join("; ") : undefined}>
                {f.hot_lines === null ? "–" : `${formatCount(f.hot_lines)} (${percent(f.l1i_share, 2)})`}{" "}
              </td>
              <td className="num">{formatBytes(f.hot_bytes)} </td>
              <td className="num">{figure(f.branch_density)} </td>
              <td className="num" title={f.taken_share === null ? f.unavailable.join("; ") : undefined}>
                {percent(f.taken_share, 0)}{" "}
              </td>
              <td className="small">{f.reason} </td>
              <td>
                <button
                  type="button"
                  disabled={!allowed || !f.movable || make.isPending}
                  title={
                    !f.movable
                      ? `kept in place: ${f.kept?.rule ?? ""}`
                      : allowed
                        ? `Plan the re-layout of ${f.name} and its hot callees`
                        : "needs the operator role"
                  }
                  aria-label={`Optimize ${f.name}`}
                  onClick={() =>
                    make.mutate(
                      { target, function_id: f.function_id },
                      { onSuccess: (p) => navigate(`/hosts/${encodeURIComponent(hostId)}/plans/${p.id}`) },
                    )
                  }
                >
                  Optimize
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
