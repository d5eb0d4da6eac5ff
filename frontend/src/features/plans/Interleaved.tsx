// SPDX-License-Identifier: Apache-2.0
// The plan's interleaved before/after (the latest comparison): progress while the agent alternates the
// original and the installed code, then per pair of windows the share of the process's samples in the
// plan's code as two dots (original, installed; a dot chart drawn from interleavedModel's D3 geometry),
// the same as a table, the change with its 95% interval in a sentence, and what the guard did and why.
import type { PlanInterleaved } from "../../api/types";
import { pairRows, shareChart, verdictSentence } from "./interleavedModel";

export function Interleaved({ c, actions }: { c: PlanInterleaved; actions?: React.ReactNode }) {
  const chart = shareChart(c);
  const rows = pairRows(c);
  return (
    <section aria-labelledby="interleaved-title" data-testid="interleaved">
      <h2 id="interleaved-title">Interleaved before/after (sampled, uninstrumented)</h2>
      <p className="muted small">
        {c.pairs} pairs of {c.window_seconds} s windows, the plan reverted in one and installed in the other, their
        order alternating; the share of the process&apos;s PC samples in the plan&apos;s code.{" "}
        {c.guard ? "Run by the guard after the install." : `Asked by ${c.requested_by}.`}
      </p>
      {c.state === "running" && (
        <div className="layout-progress" role="status" aria-live="polite">
          <progress max={1} value={c.progress ?? undefined} aria-label="Comparison progress" />
        </div>
      )}
      <p
        data-testid="interleaved-verdict"
        className={c.state === "failed" ? "error" : `verdict ${c.summary?.verdict ?? ""}`}
        role={c.state === "failed" ? "alert" : undefined}
      >
        {verdictSentence(c)}
      </p>
      {c.guard_reason && (
        <p data-testid="guard-reason" className={c.guard_action === "reverted" ? "warning" : "muted"} role="note">
          {c.guard_reason}
        </p>
      )}
      {rows.length > 0 && (
        <div className="interleaved">
          <svg
            width={chart.width}
            height={chart.height}
            role="img"
            aria-label="Share of samples in the plan's code per pair: original and installed"
          >
            {chart.ticks.map((t) => (
              <g key={t.label}>
                <line x1={40} x2={chart.width - 8} y1={t.y} y2={t.y} className="grid" />
                <text x={36} y={t.y + 4} textAnchor="end" className="tick">
                  {t.label}
                </text>
              </g>
            ))}
            {chart.pairs.map((p) => (
              <text key={p.pair} x={p.x} y={chart.height - 6} textAnchor="middle" className="tick">
                {p.pair + 1}
              </text>
            ))}
            {chart.links.map((l) => (
              <line key={l.pair} x1={l.x1} y1={l.y1} x2={l.x2} y2={l.y2} className={l.up ? "link up" : "link down"} />
            ))}
            {chart.points.map((p) => (
              <circle key={`${p.pair}-${p.arm}`} cx={p.x} cy={p.y} r={4} className={`dot ${p.arm}`}>
                <title>{`pair ${p.pair + 1}, ${p.arm}: ${(p.share * 100).toFixed(1)}% of samples`}</title>
              </circle>
            ))}
          </svg>
          <table className="data" data-testid="interleaved-pairs">
            <thead>
              <tr>
                <th>Pair</th>
                <th>Original</th>
                <th>Installed</th>
                <th>Difference</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => (
                <tr key={r.pair}>
                  <td>{r.pair}</td>
                  <td>{r.original}</td>
                  <td>{r.installed}</td>
                  <td>{r.difference}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {actions}
    </section>
  );
}
