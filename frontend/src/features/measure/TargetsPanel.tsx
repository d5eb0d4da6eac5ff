// SPDX-License-Identifier: Apache-2.0
// The host's targets: the kernel and the processes its agent serves, each with its state and running
// measurements; attach a process by pid or command name, detach one, open a target's measurements.
import { useState, type FormEvent } from "react";
import { Link } from "react-router-dom";
import { useAttach, useDetach, useTargets } from "../../api/measureQueries";
import { CommandStatus } from "./CommandStatus";

export function TargetsPanel({ hostId }: { hostId: string }) {
  const targets = useTargets(hostId);
  const attach = useAttach(hostId);
  const detach = useDetach(hostId);
  const [by, setBy] = useState("");
  const [command, setCommand] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);

  const onAttach = (e: FormEvent) => {
    e.preventDefault();
    const v = by.trim();
    if (!v) return;
    setError(null);
    const body = /^\d+$/.test(v) ? { pid: Number(v) } : { command: v };
    attach.mutate(body, { onSuccess: (c) => setCommand(c.id), onError: (err) => setError(err.message) });
  };

  return (
    <section className="targets" aria-labelledby="targets-title">
      <h2 id="targets-title">Targets</h2>
      {targets.isError && (
        <p className="error small" role="alert">
          Targets unavailable: {targets.error.message}
        </p>
      )}
      <table className="data">
        <thead>
          <tr>
            <th>Target</th>
            <th>Process</th>
            <th>State</th>
            <th>Measurements</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(targets.data ?? []).map((t) => (
            <tr key={t.id} data-target={t.id}>
              <td>{t.kind === "kernel" ? "kernel" : t.id}</td>
              <td>{t.kind === "process" ? `${t.command} (pid ${t.pid})` : "—"}</td>
              <td title={t.detail}>
                {t.state}
                {t.detail ? ` — ${t.detail}` : ""}
              </td>
              <td>{t.active_measurements} running</td>
              <td>
                <Link to={`/hosts/${encodeURIComponent(hostId)}/measure?target=${encodeURIComponent(t.id)}`}>
                  Measure
                </Link>
                {t.kind === "process" && t.state === "attached" && (
                  <button
                    type="button"
                    className="small"
                    disabled={detach.isPending}
                    onClick={() => detach.mutate(t.id, { onSuccess: (c) => setCommand(c.id) })}
                  >
                    Detach
                  </button>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <form className="toolbar" onSubmit={onAttach}>
        <label>
          Attach a process{" "}
          <input
            value={by}
            onChange={(e) => setBy(e.target.value)}
            placeholder="pid or command name"
            aria-label="Process id or command name"
          />
        </label>
        <button type="submit" disabled={attach.isPending || !by.trim()}>
          Attach
        </button>
      </form>
      {error && (
        <p className="error small" role="alert">
          {error}
        </p>
      )}
      <CommandStatus hostId={hostId} id={command} what="Attach" />
    </section>
  );
}
