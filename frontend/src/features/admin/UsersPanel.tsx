// SPDX-License-Identifier: Apache-2.0
// User management for admins: create a user with a role, change a role, disable or enable a user, and
// set a new password. The backend audits each change and refuses one that would leave no enabled
// admin (its message is shown here).
import { useState, type FormEvent } from "react";
import { useCreateUser, useResetPassword, useUpdateUser, useUsers } from "../../api/queries";
import type { Role, UserDetail } from "../../api/types";
import { formatAgo } from "../../lib/format";

const ROLES: readonly Role[] = ["viewer", "operator", "approver", "admin"];

function PasswordReset({ user }: { user: UserDetail }) {
  const reset = useResetPassword();
  const [open, setOpen] = useState(false);
  const [password, setPassword] = useState("");
  if (!open) {
    return (
      <button
        type="button"
        onClick={() => {
          reset.reset();
          setOpen(true);
        }}
      >
        Reset password
      </button>
    );
  }
  const submit = (e: FormEvent) => {
    e.preventDefault();
    reset.mutate(
      { userId: user.id, password },
      {
        onSuccess: () => {
          setPassword("");
          setOpen(false);
        },
      },
    );
  };
  return (
    <form onSubmit={submit} className="inline-form" aria-label={`New password for ${user.username}`}>
      <input
        type="password"
        aria-label="New password"
        minLength={8}
        maxLength={256}
        required
        value={password}
        autoComplete="new-password"
        onChange={(e) => setPassword(e.target.value)}
      />
      <button type="submit" disabled={reset.isPending}>
        Set password
      </button>
      <button type="button" onClick={() => setOpen(false)}>
        Cancel
      </button>
      {reset.isError && (
        <span className="error" role="alert">
          {reset.error.message}
        </span>
      )}
    </form>
  );
}

export function UsersPanel({ me }: { me: string | undefined }) {
  const users = useUsers();
  const create = useCreateUser();
  const update = useUpdateUser();
  const [username, setUsername] = useState("");
  const [password, setPassword] = useState("");
  const [role, setRole] = useState<Role>("viewer");
  const submit = (e: FormEvent) => {
    e.preventDefault();
    create.mutate(
      { username, password, role },
      {
        onSuccess: () => {
          setUsername("");
          setPassword("");
        },
      },
    );
  };
  return (
    <>
      <h2>Users</h2>
      <form onSubmit={submit} className="token-form" aria-label="New user">
        <label>
          Username{" "}
          <input
            value={username}
            required
            maxLength={64}
            pattern="[A-Za-z0-9_.@\-]+"
            autoComplete="off"
            onChange={(e) => setUsername(e.target.value)}
          />
        </label>
        <label>
          Password{" "}
          <input
            type="password"
            value={password}
            required
            minLength={8}
            maxLength={256}
            autoComplete="new-password"
            onChange={(e) => setPassword(e.target.value)}
          />
        </label>
        <label>
          Role
          <select value={role} onChange={(e) => setRole(e.target.value as Role)}>
            {ROLES.map((r) => (
              <option key={r} value={r}>
                {r}
              </option>
            ))}
          </select>
        </label>
        <button type="submit" disabled={create.isPending}>
          Create user
        </button>
      </form>
      {create.isError && (
        <p className="error" role="alert">
          {create.error.message}
        </p>
      )}
      {update.isError && (
        <p className="error" role="alert">
          {update.error.message}
        </p>
      )}
      {users.isError && (
        <p className="error" role="alert">
          {users.error.message}
        </p>
      )}
      <table aria-label="Users">
        <thead>
          <tr>
            <th>User</th>
            <th>Role</th>
            <th>State</th>
            <th>Created</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(users.data ?? []).map((u) => (
            <tr key={u.id}>
              <td>
                {u.username}
                {u.username === me && <span className="muted"> (you)</span>}
              </td>
              <td>
                <select
                  aria-label={`Role of ${u.username}`}
                  value={u.role}
                  disabled={update.isPending}
                  onChange={(e) => update.mutate({ userId: u.id, change: { role: e.target.value as Role } })}
                >
                  {ROLES.map((r) => (
                    <option key={r} value={r}>
                      {r}
                    </option>
                  ))}
                </select>
              </td>
              <td>{u.disabled_at ? `disabled ${formatAgo(u.disabled_at)}` : "enabled"}</td>
              <td>{formatAgo(u.created_at)}</td>
              <td className="row-actions">
                <button
                  type="button"
                  disabled={update.isPending}
                  onClick={() => update.mutate({ userId: u.id, change: { disabled: !u.disabled_at } })}
                >
                  {u.disabled_at ? "Enable" : "Disable"}
                </button>{" "}
                <PasswordReset user={u} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}
