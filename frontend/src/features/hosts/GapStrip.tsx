// SPDX-License-Identifier: Apache-2.0
// The host's recent period as a strip: one cell per bucket coloured by how much of it has data,
// recorded gaps (dropped by the agent, never arrived, refused for the clock) marked over it with
// their reason as a tooltip and in a list below. SVG: a few hundred cells at most.
import { useState } from "react";
import { useDataCoverage } from "../../api/queries";
import { formatCount } from "../../lib/format";
import { stripModel } from "./coverageModel";

const WINDOWS = [
  { s: 900, label: "15 min" },
  { s: 3600, label: "1 h" },
  { s: 6 * 3600, label: "6 h" },
  { s: 86400, label: "24 h" },
];

export function GapStrip({ hostId }: { hostId: string }) {
  const [windowS, setWindowS] = useState(3600);
  const timeline = useDataCoverage(hostId, windowS);
  if (timeline.isError)
    return (
      <p className="error" role="alert">
        Could not load the timeline: {timeline.error.message}
      </p>
    );
  if (!timeline.data) return <p className="muted">Loading the timeline…</p>;
  const strip = stripModel(timeline.data);
  const time = (iso: string) => new Date(iso).toLocaleTimeString();
  return (
    <section className="gap-strip" aria-label="Data timeline">
      <div className="gap-strip-head">
        <span>
          Data over the last{" "}
          <select aria-label="Period" value={windowS} onChange={(e) => setWindowS(Number(e.target.value))}>
            {WINDOWS.map((w) => (
              <option key={w.s} value={w.s}>
                {w.label}
              </option>
            ))}
          </select>
          : {(strip.coverage * 100).toFixed(0)} % covered,{" "}
          {strip.gaps.length === 0
            ? "no gaps recorded"
            : `${strip.gaps.length} gap${strip.gaps.length === 1 ? "" : "s"} recorded`}
        </span>
      </div>
      <svg
        role="img"
        aria-label="Data coverage and gaps"
        viewBox="0 0 1000 24"
        preserveAspectRatio="none"
        className="gap-strip-svg"
      >
        {strip.buckets.map((b, i) => (
          <rect
            key={i}
            data-testid="strip-bucket"
            data-coverage={b.coverage}
            x={b.x * 1000}
            y={4}
            width={b.width * 1000}
            height={16}
            className={`cov-${b.coverage}`}
          >
            <title>{`${(b.coveredMs / 1000).toFixed(0)} s of data`}</title>
          </rect>
        ))}
        {strip.gaps.map((g, i) => (
          <rect
            key={`g${i}`}
            data-testid="strip-gap"
            x={g.x * 1000}
            y={0}
            width={g.width * 1000}
            height={24}
            className={`gap gap-${g.source}`}
          >
            <title>{`gap: ${g.reason}`}</title>
          </rect>
        ))}
      </svg>
      <div className="gap-strip-axis muted">
        <span>{time(timeline.data.start)}</span>
        <span>{time(timeline.data.end)}</span>
      </div>
      {strip.gaps.length > 0 && (
        <ul className="gap-list" aria-label="Recorded gaps">
          {strip.gaps.slice(-8).map((g, i) => (
            <li key={i}>
              {time(g.start)}–{time(g.end)}: {g.reason} ({formatCount(g.messages)} batch
              {g.messages === 1 ? "" : "es"}, {g.source === "agent" ? "reported by the agent" : "found by the backend"})
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
