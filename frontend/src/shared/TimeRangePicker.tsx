// SPDX-License-Identifier: Apache-2.0
// Picks the time range every view of a host uses: a relative preset (the last 10 s … 24 h, following
// new samples) or an absolute from–to (local time) such as an incident window.
import { useState, type FormEvent } from "react";
import {
  PRESETS,
  formatRange,
  fromLocalInput,
  resolveRange,
  toLocalInput,
  MAX_RANGE_S,
  type TimeRange,
} from "../lib/timeRange";

export function TimeRangePicker({
  range,
  onChange,
  label = "Time range",
}: {
  range: TimeRange;
  onChange: (r: TimeRange) => void;
  label?: string;
}) {
  const [custom, setCustom] = useState(false);
  const resolved = resolveRange(range);
  const [from, setFrom] = useState(toLocalInput(resolved.from));
  const [to, setTo] = useState(toLocalInput(resolved.to));
  const [error, setError] = useState<string | null>(null);
  const id = label.replace(/\W+/g, "-").toLowerCase();

  const openCustom = () => {
    const r = resolveRange(range);
    setFrom(toLocalInput(r.from));
    setTo(toLocalInput(r.to));
    setError(null);
    setCustom((c) => !c);
  };
  const apply = (e: FormEvent) => {
    e.preventDefault();
    const a = fromLocalInput(from);
    const b = fromLocalInput(to);
    if (!a || !b) return setError("Enter both times as YYYY-MM-DD hh:mm:ss.");
    if (b <= a) return setError("The end must be after the start.");
    if (b.getTime() - a.getTime() > MAX_RANGE_S * 1000) return setError("A range may span at most 24 h.");
    setError(null);
    setCustom(false);
    onChange({ kind: "absolute", from: a, to: b });
  };

  return (
    <div className="range-picker">
      <span className="toolbar-label" id={`${id}-label`}>
        {label}
      </span>
      <div role="group" aria-labelledby={`${id}-label`} className="segmented">
        {PRESETS.map((p) => (
          <button
            key={p.seconds}
            type="button"
            aria-pressed={range.kind === "relative" && range.seconds === p.seconds}
            onClick={() => onChange({ kind: "relative", seconds: p.seconds })}
          >
            {p.label}
          </button>
        ))}
        <button type="button" aria-pressed={range.kind === "absolute"} aria-expanded={custom} onClick={openCustom}>
          Custom…
        </button>
      </div>
      <span className="range-label" data-testid={`${id}-text`}>
        {formatRange(range)}
      </span>
      {custom && (
        <form className="range-custom" onSubmit={apply} aria-label={`${label}: from and to`}>
          <label>
            From <input type="datetime-local" step="1" value={from} onChange={(e) => setFrom(e.target.value)} />
          </label>
          <label>
            To <input type="datetime-local" step="1" value={to} onChange={(e) => setTo(e.target.value)} />
          </label>
          <button type="submit">Apply</button>
          {error && (
            <span className="error small" role="alert">
              {error}
            </span>
          )}
        </form>
      )}
    </div>
  );
}
