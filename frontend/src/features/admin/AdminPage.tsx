// SPDX-License-Identifier: Apache-2.0
// Host identity and users for admins: create one-time enrolment tokens (the secret is shown once, with
// the CA certificate and the command that uses them), see and revoke tokens, approve or reject keys
// that asked to enrol a host without a token, retire or delete hosts, and manage users.
import { useState, type FormEvent } from "react";
import { Link } from "react-router-dom";
import {
  useCreateEnrolmentToken,
  useEnrolmentRequests,
  useEnrolmentTokens,
  useHosts,
  useRevokeEnrolmentToken,
} from "../../api/queries";
import type { EnrolmentToken, EnrolmentTokenCreated } from "../../api/types";
import { formatAgo } from "../../lib/format";
import { HostStatus } from "../../shared/hostParts";
import { useAuth } from "../../shared/AuthContext";
import { HostAdminActions } from "./HostAdminActions";
import { PendingEnrolments } from "./PendingEnrolments";
import { UsersPanel } from "./UsersPanel";
import { useIsAdmin } from "./useIsAdmin";

function tokenState(t: EnrolmentToken, now = Date.now()): string {
  if (t.used_at) return `used by ${t.used_by_host ?? "a host"} ${formatAgo(t.used_at)}`;
  if (t.revoked_at) return "revoked";
  if (Date.parse(t.expires_at) <= now) return "expired";
  return `valid until ${new Date(t.expires_at).toLocaleString()}`;
}

function CreatedToken({ created }: { created: EnrolmentTokenCreated }) {
  const server = `${window.location.hostname}:${created.enroll_port - 1}`;
  return (
    <div className="created-token" role="region" aria-label="New enrolment token">
      <p>Copy it now: the token is shown only once.</p>
      <label>
        Enrolment token
        <input readOnly value={created.token} aria-label="Enrolment token" onFocus={(e) => e.currentTarget.select()} />
      </label>
      <details>
        <summary>CA certificate and command</summary>
        <pre className="ca-pem">{created.ca_pem}</pre>
        <pre>{`hotpathd enroll --server ${server} --ca-file ca.pem --token-file token`}</pre>
      </details>
    </div>
  );
}

export function AdminPage() {
  const isAdmin = useIsAdmin();
  const tokens = useEnrolmentTokens(isAdmin);
  const requests = useEnrolmentRequests(isAdmin);
  const hosts = useHosts();
  const create = useCreateEnrolmentToken();
  const revoke = useRevokeEnrolmentToken();
  const { session } = useAuth();
  const [note, setNote] = useState("");
  const [hours, setHours] = useState(24);
  const [forHost, setForHost] = useState("");

  if (!isAdmin) {
    return (
      <section className="notice">
        <h1>Admin</h1>
        <p>This page needs the admin role.</p>
      </section>
    );
  }
  const submit = (e: FormEvent) => {
    e.preventDefault();
    create.mutate({ note, hours, host_id: forHost.trim() || null });
  };
  return (
    <section className="admin-page">
      <h1>Admin</h1>

      <h2>Enrolment tokens</h2>
      <form onSubmit={submit} className="token-form">
        <label>
          Note <input value={note} maxLength={200} onChange={(e) => setNote(e.target.value)} />
        </label>
        <label title="Needed to enrol again a host that holds a certificate already">
          For host id (optional)
          <input value={forHost} maxLength={128} onChange={(e) => setForHost(e.target.value)} />
        </label>
        <label>
          Valid for (hours)
          <input type="number" min={1} max={720} value={hours} onChange={(e) => setHours(Number(e.target.value))} />
        </label>
        <button type="submit" disabled={create.isPending}>
          Create enrolment token
        </button>
      </form>
      {create.isError && (
        <p className="error" role="alert">
          {create.error.message}
        </p>
      )}
      {create.data && <CreatedToken created={create.data} />}
      <table aria-label="Enrolment tokens">
        <thead>
          <tr>
            <th>Note</th>
            <th>For host</th>
            <th>Created</th>
            <th>State</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(tokens.data ?? []).map((t) => (
            <tr key={t.id}>
              <td>{t.note || <span className="muted">no note</span>}</td>
              <td>{t.host_id ? <code>{t.host_id}</code> : <span className="muted">any new host</span>}</td>
              <td>
                {t.created_by}, {formatAgo(t.created_at)}
              </td>
              <td>{tokenState(t)}</td>
              <td>
                {!t.used_at && !t.revoked_at && (
                  <button type="button" onClick={() => revoke.mutate(t.id)}>
                    Revoke
                  </button>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>

      <PendingEnrolments requests={requests.data ?? []} />

      <h2>Hosts</h2>
      <table aria-label="Hosts">
        <thead>
          <tr>
            <th>Host</th>
            <th>Id</th>
            <th>Status</th>
            <th>Identity</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(hosts.data ?? []).map((h) => (
            <tr key={h.id}>
              <td>
                <Link to={`/hosts/${encodeURIComponent(h.id)}`}>{h.hostname}</Link>
              </td>
              <td>
                <code>{h.id}</code>
              </td>
              <td>
                <HostStatus host={h} />
              </td>
              <td>
                {h.status === "retired"
                  ? "retired"
                  : h.enrolled
                    ? `certificate until ${h.cert_not_after ? new Date(h.cert_not_after).toLocaleDateString() : "?"}`
                    : "not enrolled"}
              </td>
              <td>
                <HostAdminActions host={h} afterDelete={null} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>

      <UsersPanel me={session?.user?.username} />
    </section>
  );
}
