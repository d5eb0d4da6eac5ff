// SPDX-License-Identifier: Apache-2.0
// A command's state as it moves (queued, sent, running with the agent's progress, then done, failed or
// cancelled), with Cancel while it has not finished.
import { useCancelCommand } from "../../api/measureQueries";
import { useCommandUntilEnded } from "../../api/queries";

const FINISHED = new Set(["done", "failed", "cancelled"]);

export function CommandStatus({ hostId, id, what }: { hostId: string; id: string | null; what: string }) {
  const cmd = useCommandUntilEnded(hostId, id);
  const cancel = useCancelCommand(hostId);
  if (!id) return null;
  const c = cmd.data;
  if (!c) return <p className="muted small">{what}: sending…</p>;
  const finished = FINISHED.has(c.state);
  return (
    <div className="command-status" role="status" aria-label={`${what} command`}>
      <span className={`pill state-${c.state}`}>
        {what}: {c.state}
      </span>
      {c.progress !== null && !finished && (
        <progress max={1} value={c.progress} aria-label={`${what} progress`}>
          {Math.round(c.progress * 100)} %
        </progress>
      )}
      {c.message && <span className="muted small"> {c.message}</span>}
      {c.error && (
        <span className="error small" role="alert">
          {" "}
          {c.error}
        </span>
      )}
      {!finished && (
        <button
          type="button"
          className="small"
          disabled={cancel.isPending || c.cancel_requested}
          onClick={() => cancel.mutate(c.id)}
        >
          {c.cancel_requested ? "Cancelling…" : "Cancel"}
        </button>
      )}
    </div>
  );
}
