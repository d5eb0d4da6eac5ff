// SPDX-License-Identifier: Apache-2.0
// Host identity in the console: the local agent enrolled itself with the one-time token that
// `make run` created (the token shows as used by this host), a new agent asking to enrol without a
// token is approved in the console and receives its certificate, and an admin deletes that host; a new
// key cannot take over an enrolled host, two keys for one host id show as a conflict with their
// fingerprints, pending requests are rejected in bulk, and an admin manages users.
import { test, expect, request } from "@playwright/test";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { api, apiAs, baseURL, dataDir, hostname, readyHost } from "./helpers";

const hotpathd = join(__dirname, "..", "..", "agent", "build", "hotpathd");
const grpcPort = process.env.HOTPATH_GRPC_PORT ?? "15051";

test("the local agent enrolled itself with its one-time token", async ({ page }) => {
  const { hostId } = await readyHost();
  await page.goto("/admin");
  await expect(page.getByRole("heading", { name: "Admin" })).toBeVisible();
  const tokens = page.getByRole("table", { name: "Enrolment tokens" });
  const used = tokens.getByRole("row").filter({ hasText: "the agent make run starts on this host" });
  await expect(used).toContainText(`used by ${hostId}`);
  const hosts = page.getByRole("table", { name: "Hosts" });
  await expect(hosts.getByRole("row").filter({ hasText: hostname })).toContainText("certificate until");
});

test("a host that asks to enrol is approved in the console, gets its certificate, and is deleted", async ({ page }) => {
  const ctx = await api();
  const hostId = `e2e-new-${Date.now()}`;
  const state = mkdtempSync(join(tmpdir(), "hotpath-e2e-agent-"));
  const args = [
    "enroll",
    "--server",
    `127.0.0.1:${grpcPort}`,
    "--ca-file",
    `${dataDir}/tls/ca.pem`,
    "--state-dir",
    state,
    "--host-id",
    hostId,
    "--no-wait",
  ];
  try {
    // Without a token the backend records the request; the agent is told to wait (exit status 4).
    const first = spawnSync(hotpathd, args, { encoding: "utf8", env: { ...process.env, HOTPATH_ENROLL_TOKEN: "" } });
    expect(first.status, first.stderr).toBe(4);
    expect(first.stderr).toContain("waits for an admin to approve");

    await page.goto("/admin");
    const pending = page.getByRole("table", { name: "Pending enrolments" });
    const row = pending.getByRole("row").filter({ hasText: hostId });
    await expect(row).toBeVisible();
    await row.getByRole("button", { name: /^Approve/ }).click();
    await expect(pending.getByRole("row").filter({ hasText: hostId })).toHaveCount(0);

    // Asked again with the same key, the approved request is answered with a certificate.
    const out = execFileSync(hotpathd, args, { encoding: "utf8", env: { ...process.env, HOTPATH_ENROLL_TOKEN: "" } });
    expect(out).toContain(`enrolled host ${hostId}`);
    const host = await (await ctx.get(`/api/v1/hosts/${hostId}`)).json();
    expect(host.enrolled).toBe(true);

    // Delete it from the admin page, after the confirmation.
    await page.reload();
    const hosts = page.getByRole("table", { name: "Hosts" });
    const hostRow = hosts.getByRole("row").filter({ hasText: hostId });
    await hostRow.getByRole("button", { name: "Delete host" }).click();
    await hostRow.getByRole("group", { name: "Confirm delete" }).getByRole("button", { name: "Delete" }).click();
    await expect(hosts.getByRole("row").filter({ hasText: hostId })).toHaveCount(0);
    expect((await ctx.get(`/api/v1/hosts/${hostId}`)).status()).toBe(404);
  } finally {
    rmSync(state, { recursive: true, force: true });
  }
});

/** Ask to enrol without a token from its own state folder (its own key); the exit status and stderr. */
function askToEnrol(hostId: string, state: string) {
  const args = [
    "enroll",
    "--server",
    `127.0.0.1:${grpcPort}`,
    "--ca-file",
    `${dataDir}/tls/ca.pem`,
    "--state-dir",
    state,
    "--host-id",
    hostId,
    "--no-wait",
  ];
  return spawnSync(hotpathd, args, { encoding: "utf8", env: { ...process.env, HOTPATH_ENROLL_TOKEN: "" } });
}

function keyFingerprint(stderr: string): string {
  const m = /key SHA256:([0-9a-f]{64})/.exec(stderr);
  if (!m) throw new Error(`no key fingerprint in: ${stderr}`);
  return m[1];
}

test("a new key cannot take over an enrolled host, and two keys for one host id show as a conflict", async ({
  page,
}) => {
  const { ctx, hostId: enrolledId } = await readyHost();
  const hostId = `e2e-conflict-${Date.now()}`;
  const states = [0, 1, 2].map(() => mkdtempSync(join(tmpdir(), "hotpath-e2e-agent-")));
  try {
    // A tokenless request for this machine's enrolled host id is refused outright, never queued.
    const takeover = askToEnrol(enrolledId, states[0]);
    expect(takeover.status, takeover.stderr).not.toBe(0);
    expect(takeover.status).not.toBe(4);
    expect(takeover.stderr).toContain("enrolled already");

    // Two keys ask for one new host id: both wait, each told its key's fingerprint.
    const first = askToEnrol(hostId, states[1]);
    const second = askToEnrol(hostId, states[2]);
    expect(first.status, first.stderr).toBe(4);
    expect(second.status, second.stderr).toBe(4);
    const [fp1, fp2] = [keyFingerprint(first.stderr), keyFingerprint(second.stderr)];
    expect(fp1).not.toBe(fp2);

    await page.goto("/admin");
    const pending = page.getByRole("table", { name: "Pending enrolments" });
    await expect(pending.getByRole("row").filter({ hasText: enrolledId })).toHaveCount(0);
    const rows = pending.getByRole("row").filter({ hasText: hostId });
    await expect(rows).toHaveCount(2);
    const row1 = rows.filter({ hasText: fp1 });
    const row2 = rows.filter({ hasText: fp2 });
    await expect(row1).toContainText("conflict: 1 other key for this id");
    await expect(row2).toContainText("conflict: 1 other key for this id");

    // Approving the first key rejects the second: the first gets the certificate; the second is refused
    // (the host id holds the first key's certificate now, so it is refused as enrolled already).
    await row1.getByRole("button", { name: /^Approve/ }).click();
    await expect(rows).toHaveCount(0);
    const again1 = askToEnrol(hostId, states[1]);
    expect(again1.status, again1.stderr).toBe(0);
    const again2 = askToEnrol(hostId, states[2]);
    expect(again2.status).not.toBe(0);
    expect(again2.stderr).toContain("enrolled already");
    const audit = await (await ctx.get("/api/v1/audit?action=enrolment_rejected&limit=1000")).json();
    expect(
      audit.some(
        (a: { target: string; detail: { key_fingerprint?: string } }) =>
          a.target === hostId && a.detail.key_fingerprint === fp2,
      ),
    ).toBe(true);
  } finally {
    await ctx.delete(`/api/v1/hosts/${hostId}`);
    for (const s of states) rmSync(s, { recursive: true, force: true });
  }
});

test("an admin rejects pending enrolments in bulk", async ({ page }) => {
  const stamp = Date.now();
  const states = [0, 1, 2].map(() => mkdtempSync(join(tmpdir(), "hotpath-e2e-agent-")));
  try {
    states.forEach((state, i) => expect(askToEnrol(`e2e-bulk-${stamp}-${i}`, state).status).toBe(4));
    await page.goto("/admin");
    const pending = page.getByRole("table", { name: "Pending enrolments" });
    await expect(pending.getByRole("row").filter({ hasText: `e2e-bulk-${stamp}-` })).toHaveCount(3);
    await pending.getByRole("checkbox", { name: new RegExp(`^Select e2e-bulk-${stamp}-0 `) }).check();
    await pending.getByRole("checkbox", { name: new RegExp(`^Select e2e-bulk-${stamp}-1 `) }).check();
    await page.getByRole("button", { name: "Reject selected (2)" }).click();
    await expect(page.getByRole("status")).toHaveText("Rejected 2 requests.");
    await expect(pending.getByRole("row").filter({ hasText: `e2e-bulk-${stamp}-` })).toHaveCount(1);
    await page.getByRole("button", { name: /^Reject all pending/ }).click();
    await expect(page.getByText("No host is waiting.")).toBeVisible();
    const refused = askToEnrol(`e2e-bulk-${stamp}-0`, states[0]);
    expect(refused.stderr).toContain("rejected");
  } finally {
    for (const s of states) rmSync(s, { recursive: true, force: true });
  }
});

test("an admin manages users in the console: create, role, disable, reset password", async ({ page }) => {
  const username = `e2e-user-${Date.now()}`;
  await page.goto("/admin");
  const form = page.getByRole("form", { name: "New user" });
  await form.getByLabel("Username").fill(username);
  await form.getByLabel("Password").fill("first-password-1");
  await form.getByLabel("Role").selectOption("operator");
  await form.getByRole("button", { name: "Create user" }).click();
  const users = page.getByRole("table", { name: "Users" });
  const row = users.getByRole("row").filter({ hasText: username });
  await expect(row.getByLabel(`Role of ${username}`)).toHaveValue("operator");
  const session = await apiAs(username, "first-password-1");
  expect((await (await session.get("/api/v1/auth/me")).json()).role).toBe("operator");

  // A new role applies to the token the user holds already.
  await row.getByLabel(`Role of ${username}`).selectOption("approver");
  await expect.poll(async () => (await (await session.get("/api/v1/auth/me")).json()).role).toBe("approver");

  // Disabled: the existing token stops working and signing in is refused.
  await row.getByRole("button", { name: "Disable" }).click();
  await expect(row).toContainText("disabled");
  expect((await session.get("/api/v1/auth/me")).status()).toBe(401);
  const anon = await request.newContext({ baseURL });
  const login = (password: string) => anon.post("/api/v1/auth/login", { data: { username, password } });
  expect((await login("first-password-1")).status()).toBe(403);
  await row.getByRole("button", { name: "Enable" }).click();
  await expect(row).toContainText("enabled");

  // A new password replaces the old one.
  await row.getByRole("button", { name: "Reset password" }).click();
  await row.getByLabel("New password", { exact: true }).fill("second-password-2");
  await row.getByRole("button", { name: "Set password" }).click();
  await expect(row.getByRole("button", { name: "Reset password" })).toBeVisible();
  expect((await login("first-password-1")).status()).toBe(401);
  expect((await login("second-password-2")).status()).toBe(200);

  // The only admin cannot demote itself: the refusal shows and the role stays.
  const me = users.getByRole("row").filter({ has: page.getByText("(you)") });
  await me.getByLabel("Role of admin").selectOption("viewer");
  await expect(page.getByRole("alert")).toContainText("last enabled admin");
  await expect(me.getByLabel("Role of admin")).toHaveValue("admin");
  await anon.dispose();
  await session.dispose();
});

test("the logs make run writes are not readable by other users", async () => {
  for (const name of ["backend.log", "agent.log"]) {
    const mode = statSync(`${dataDir}/log/${name}`).mode & 0o777;
    expect(mode & 0o007, `${name} mode ${mode.toString(8)}`).toBe(0);
  }
  expect(statSync(`${dataDir}/log`).mode & 0o007).toBe(0);
});
