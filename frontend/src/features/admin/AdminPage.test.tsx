// SPDX-License-Identifier: Apache-2.0
import { afterEach, describe, expect, it, vi } from "vitest";
import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { renderApp } from "../../test/render";
import { host, json, routeFetch } from "../../test/fixtures";
import { setSession } from "../../api/session";

const ADMIN = { id: "u", username: "admin", role: "admin" as const };
const token = {
  id: "11111111-1111-1111-1111-111111111111",
  note: "rack 4",
  host_id: null,
  created_by: "admin",
  created_at: new Date().toISOString(),
  expires_at: new Date(Date.now() + 3600_000).toISOString(),
  used_at: null,
  used_by_host: null,
  revoked_at: null,
};

const REQ_ID = "22222222-2222-2222-2222-222222222222";
function request(over: Record<string, unknown> = {}) {
  return {
    id: REQ_ID,
    host_id: "m-1",
    key_fingerprint: "ab".repeat(32),
    hostname: "newbox",
    peer: "ipv4:10.0.2.15:4000",
    requested_at: new Date().toISOString(),
    status: "pending",
    decided_by: null,
    decided_at: null,
    conflicting: 0,
    host_enrolled: false,
    ...over,
  };
}
const USERS = [
  { ...ADMIN, created_at: new Date().toISOString(), disabled_at: null },
  { id: "u2", username: "olga", role: "viewer", created_at: new Date().toISOString(), disabled_at: null },
];

function admin(extra: Record<string, (req: Request) => Response | Promise<Response>> = {}) {
  setSession({ token: "t", user: ADMIN });
  const f = routeFetch({
    "/api/v1/auth/me": () => json(ADMIN),
    "/api/v1/hosts": () =>
      json([host(), host({ id: "h2", hostname: "old-box", status: "retired", enrolled: false, online: false })]),
    "/api/v1/enrolment-tokens": () => json([token]),
    "/api/v1/enrolment-requests": () => json([request()]),
    "/api/v1/users": () => json(USERS),
    ...extra,
  });
  vi.stubGlobal("fetch", f.fetch);
  vi.stubGlobal("WebSocket", undefined);
  return f;
}

describe("admin page", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("creates an enrolment token and shows the secret once with the CA", async () => {
    let sent: unknown = null;
    const f = admin({
      "POST /api/v1/enrolment-tokens": async (req) => {
        const body = await req.json();
        sent = body;
        return json(
          {
            ...token,
            note: body.note,
            token: "hpe_secret-shown-once",
            ca_pem: "-----BEGIN CERTIFICATE-----\nX\n",
            enroll_port: 50052,
          },
          201,
        );
      },
    });
    renderApp("/admin");
    expect(await screen.findByRole("heading", { name: "Admin" })).toBeInTheDocument();
    await userEvent.type(screen.getByLabelText("Note"), "qemu guest");
    await userEvent.type(screen.getByLabelText("For host id (optional)"), "guest-1");
    await userEvent.click(screen.getByRole("button", { name: "Create enrolment token" }));
    const region = await screen.findByRole("region", { name: "New enrolment token" });
    expect(within(region).getByLabelText("Enrolment token")).toHaveValue("hpe_secret-shown-once");
    expect(region).toHaveTextContent("shown only once");
    expect(region).toHaveTextContent("--token-file token");
    const post = f.requests.find((r) => r.method === "POST" && r.url.endsWith("/enrolment-tokens"))!;
    expect(post.headers.get("Authorization")).toBe("Bearer t");
    expect(sent).toEqual({ note: "qemu guest", hours: 24, host_id: "guest-1" });
    const list = screen.getByRole("table", { name: "Enrolment tokens" });
    expect(within(list).getByText("rack 4")).toBeInTheDocument();
    expect(within(list).queryByText("hpe_secret-shown-once")).toBeNull();
  });

  it("approves a pending host", async () => {
    const approve = vi.fn(() => json(request({ status: "approved", decided_by: "admin" })));
    admin({ [`POST /api/v1/enrolment-requests/${REQ_ID}/approve`]: approve });
    renderApp("/admin");
    const table = await screen.findByRole("table", { name: "Pending enrolments" });
    expect(table).toHaveTextContent("ipv4:10.0.2.15:4000");
    await userEvent.click(within(table).getByRole("button", { name: "Approve newbox" }));
    await waitFor(() => expect(approve).toHaveBeenCalledTimes(1));
  });

  it("shows each key's fingerprint, conflicting keys and hosts enrolled already, and rejects in bulk", async () => {
    const other = "33333333-3333-3333-3333-333333333333";
    const enrolled = "44444444-4444-4444-4444-444444444444";
    let sent: unknown = null;
    admin({
      "/api/v1/enrolment-requests": () =>
        json([
          request({ conflicting: 1 }),
          request({ id: other, key_fingerprint: "cd".repeat(32), peer: "ipv4:203.0.113.9:555", conflicting: 1 }),
          request({
            id: enrolled,
            host_id: "web-1",
            hostname: "web-1",
            key_fingerprint: "ef".repeat(32),
            host_enrolled: true,
          }),
        ]),
      "POST /api/v1/enrolment-requests/reject": async (req) => {
        sent = await req.json();
        return json({ rejected: 1 });
      },
    });
    renderApp("/admin");
    const table = await screen.findByRole("table", { name: "Pending enrolments" });
    const rows = within(table).getAllByRole("row").slice(1);
    expect(rows).toHaveLength(3);
    expect(rows[0]).toHaveTextContent("ab".repeat(32));
    expect(rows[1]).toHaveTextContent("cd".repeat(32));
    expect(rows[0]).toHaveTextContent("conflict: 1 other key for this id");
    expect(rows[1]).toHaveTextContent("conflict: 1 other key for this id");
    expect(rows[2]).toHaveTextContent("already enrolled");
    expect(within(rows[2]).getByRole("button", { name: "Approve web-1" })).toBeDisabled();
    expect(within(rows[0]).getByRole("button", { name: "Approve newbox" })).toBeEnabled();

    await userEvent.click(within(rows[1]).getByRole("checkbox"));
    await userEvent.click(screen.getByRole("button", { name: "Reject selected (1)" }));
    await waitFor(() => expect(sent).toEqual({ request_ids: [other], all_pending: false }));
    await userEvent.click(screen.getByRole("button", { name: "Reject all pending (3)" }));
    await waitFor(() => expect(sent).toEqual({ all_pending: true }));
  });

  it("creates users, changes a role, disables a user, resets a password and shows a refusal", async () => {
    const bodies: Record<string, unknown[]> = { create: [], patch: [], password: [] };
    admin({
      "POST /api/v1/users": async (req) => {
        bodies.create.push(await req.json());
        return json({ ...USERS[1], id: "u3", username: "new-op", role: "operator" }, 201);
      },
      "PATCH /api/v1/users/u2": async (req) => {
        bodies.patch.push(await req.json());
        return json(USERS[1]);
      },
      "PATCH /api/v1/users/u": () => json({ detail: "This is the last enabled admin: make another admin first" }, 409),
      "POST /api/v1/users/u2/password": async (req) => {
        bodies.password.push(await req.json());
        return new Response(null, { status: 204 });
      },
    });
    renderApp("/admin");
    const form = await screen.findByRole("form", { name: "New user" });
    await userEvent.type(within(form).getByLabelText("Username"), "new-op");
    await userEvent.type(within(form).getByLabelText("Password"), "long-enough-1");
    await userEvent.selectOptions(within(form).getByLabelText("Role"), "operator");
    await userEvent.click(within(form).getByRole("button", { name: "Create user" }));
    await waitFor(() =>
      expect(bodies.create).toEqual([{ username: "new-op", password: "long-enough-1", role: "operator" }]),
    );

    const users = screen.getByRole("table", { name: "Users" });
    await userEvent.selectOptions(within(users).getByLabelText("Role of olga"), "approver");
    await waitFor(() => expect(bodies.patch).toEqual([{ role: "approver" }]));
    const olga = within(users).getByText("olga").closest("tr")!;
    await userEvent.click(within(olga).getByRole("button", { name: "Disable" }));
    await waitFor(() => expect(bodies.patch).toEqual([{ role: "approver" }, { disabled: true }]));
    await userEvent.click(within(olga).getByRole("button", { name: "Reset password" }));
    await userEvent.type(within(olga).getByLabelText("New password"), "another-pass-2");
    await userEvent.click(within(olga).getByRole("button", { name: "Set password" }));
    await waitFor(() => expect(bodies.password).toEqual([{ password: "another-pass-2" }]));

    await userEvent.selectOptions(within(users).getByLabelText("Role of admin"), "viewer");
    expect(await screen.findByText("This is the last enabled admin: make another admin first")).toBeInTheDocument();
  });

  it("deletes a host only after the confirmation and revokes an unused token", async () => {
    const del = vi.fn(() => new Response(null, { status: 204 }));
    const revoke = vi.fn(() => new Response(null, { status: 204 }));
    admin({ "DELETE /api/v1/hosts/h2": del, [`DELETE /api/v1/enrolment-tokens/${token.id}`]: revoke });
    renderApp("/admin");
    const hosts = await screen.findByRole("table", { name: "Hosts" });
    const row = (await within(hosts).findByText("old-box")).closest("tr")!;
    expect(row).toHaveTextContent("retired");
    expect(within(row).queryByRole("button", { name: "Retire host" })).toBeNull();
    await userEvent.click(within(row).getByRole("button", { name: "Delete host" }));
    expect(del).not.toHaveBeenCalled();
    const confirm = within(row).getByRole("group", { name: "Confirm delete" });
    expect(confirm).toHaveTextContent("Delete old-box with its samples and gaps?");
    await userEvent.click(within(confirm).getByRole("button", { name: "Delete" }));
    await waitFor(() => expect(del).toHaveBeenCalledTimes(1));

    const tokens = screen.getByRole("table", { name: "Enrolment tokens" });
    await userEvent.click(within(tokens).getByRole("button", { name: "Revoke" }));
    await waitFor(() => expect(revoke).toHaveBeenCalledTimes(1));
  });

  it("is closed to other roles", async () => {
    setSession({ token: "t", user: { id: "v", username: "viewer", role: "viewer" } });
    vi.stubGlobal(
      "fetch",
      routeFetch({
        "/api/v1/auth/me": () => json({ id: "v", username: "viewer", role: "viewer" }),
        "/api/v1/hosts": () => json([]),
      }).fetch,
    );
    vi.stubGlobal("WebSocket", undefined);
    renderApp("/admin");
    expect(await screen.findByText("This page needs the admin role.")).toBeInTheDocument();
    expect(screen.queryByRole("link", { name: "Admin" })).toBeNull();
  });
});
