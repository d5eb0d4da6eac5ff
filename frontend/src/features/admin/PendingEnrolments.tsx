// SPDX-License-Identifier: Apache-2.0
// Keys waiting to enrol a host id without a token. Each row is one key, with its SHA-256 fingerprint
// (compare it with `openssl pkey -in key.pem -pubout -outform DER | sha256sum` on the host); two keys
// asking for the same host id are both shown and marked as a conflict, and a host id that holds a
// certificate already is marked and cannot be approved. Admins reject one, the selected or all.
import { useState } from "react";
import { useDecideEnrolment, useRejectEnrolments } from "../../api/queries";
import type { EnrolmentRequest } from "../../api/types";
import { formatAgo } from "../../lib/format";

function Flags({ r }: { r: EnrolmentRequest }) {
  return (
    <>
      {r.host_enrolled && <span className="badge danger">already enrolled</span>}
      {r.conflicting > 0 && (
        <span className="badge danger">
          conflict: {r.conflicting} other {r.conflicting === 1 ? "key" : "keys"} for this id
        </span>
      )}
    </>
  );
}

export function PendingEnrolments({ requests }: { requests: EnrolmentRequest[] }) {
  const decide = useDecideEnrolment();
  const rejectMany = useRejectEnrolments();
  const [selected, setSelected] = useState<ReadonlySet<string>>(new Set());
  const pending = requests.filter((r) => r.status === "pending");
  const chosen = pending.filter((r) => selected.has(r.id)).map((r) => r.id);
  const toggle = (id: string, on: boolean) =>
    setSelected((prev) => {
      const next = new Set(prev);
      if (on) next.add(id);
      else next.delete(id);
      return next;
    });
  const error = decide.error ?? rejectMany.error;
  return (
    <>
      <h2>Hosts waiting for approval</h2>
      {error && (
        <p className="error" role="alert">
          {error.message}
        </p>
      )}
      {rejectMany.data && <p role="status">Rejected {rejectMany.data.rejected} requests.</p>}
      {pending.length === 0 ? (
        <p className="muted">No host is waiting.</p>
      ) : (
        <>
          <div className="bulk-actions">
            <button
              type="button"
              disabled={chosen.length === 0 || rejectMany.isPending}
              onClick={() => rejectMany.mutate(chosen, { onSuccess: () => setSelected(new Set()) })}
            >
              Reject selected ({chosen.length})
            </button>
            <button
              type="button"
              disabled={rejectMany.isPending}
              onClick={() => rejectMany.mutate(null, { onSuccess: () => setSelected(new Set()) })}
            >
              Reject all pending ({pending.length})
            </button>
          </div>
          <table aria-label="Pending enrolments">
            <thead>
              <tr>
                <th />
                <th>Host</th>
                <th>Id</th>
                <th>Key (SHA-256)</th>
                <th>From</th>
                <th>Asked</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {pending.map((r) => (
                <tr key={r.id} className={r.host_enrolled || r.conflicting > 0 ? "warn" : undefined}>
                  <td>
                    <input
                      type="checkbox"
                      aria-label={`Select ${r.host_id} key ${r.key_fingerprint.slice(0, 16)}`}
                      checked={selected.has(r.id)}
                      onChange={(e) => toggle(r.id, e.target.checked)}
                    />
                  </td>
                  <td>{r.hostname}</td>
                  <td>
                    <code>{r.host_id}</code> <Flags r={r} />
                  </td>
                  <td>
                    <code className="fingerprint">{r.key_fingerprint}</code>
                  </td>
                  <td>{r.peer}</td>
                  <td>{formatAgo(r.requested_at)}</td>
                  <td>
                    <button
                      type="button"
                      disabled={r.host_enrolled}
                      title={
                        r.host_enrolled
                          ? "This host holds a certificate: only a token created for its host id can enrol it again"
                          : r.conflicting > 0
                            ? "Approving this key rejects the other keys for this host id"
                            : undefined
                      }
                      onClick={() => decide.mutate({ requestId: r.id, approve: true })}
                    >
                      Approve {r.hostname}
                    </button>{" "}
                    <button type="button" onClick={() => decide.mutate({ requestId: r.id, approve: false })}>
                      Reject
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </>
  );
}
