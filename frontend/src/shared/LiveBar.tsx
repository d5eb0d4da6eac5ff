// SPDX-License-Identifier: Apache-2.0
// Whether a view follows new samples, with a pause/resume switch and a visible tick at every update
// (the time of the data shown, so a reader knows how fresh it is).
import type { TimeRange } from "../lib/timeRange";

export function LiveBar({
  range,
  paused,
  onPause,
  updatedAt,
  fetching,
}: {
  range: TimeRange;
  paused: boolean;
  onPause: (paused: boolean) => void;
  updatedAt: number;
  fetching: boolean;
}) {
  const relative = range.kind === "relative";
  const time = updatedAt ? new Date(updatedAt).toLocaleTimeString() : "—";
  return (
    <div className="live-bar" aria-live="polite">
      {relative ? (
        <>
          <button
            type="button"
            aria-pressed={paused}
            onClick={() => onPause(!paused)}
            title={paused ? "Resume live updates" : "Pause: keep this view as it is"}
          >
            {paused ? "▶ Resume" : "❚❚ Pause"}
          </button>
          <span className={`tick${paused ? " paused" : ""}`} key={updatedAt} data-testid="update-tick">
            {paused ? `paused · data of ${time}` : `live · updated ${time}`}
          </span>
        </>
      ) : (
        <span className="tick fixed" data-testid="update-tick">
          fixed range · loaded {time}
        </span>
      )}
      {fetching && <span className="muted small">updating…</span>}
    </div>
  );
}
