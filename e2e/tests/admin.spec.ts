// SPDX-License-Identifier: Apache-2.0
// Host identity in the console: the local agent enrolled itself with the one-time token that
// `make run` created (the token shows as used by this host), a new agent asking to enrol without a
// token is approved in the console and receives its certificate, and an admin deletes that host.
import { test, expect } from "@playwright/test";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { api, dataDir, hostname, readyHost } from "./helpers";

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
  const args = ["enroll", "--server", `127.0.0.1:${grpcPort}`, "--ca-file", `${dataDir}/tls/ca.pem`,
                "--state-dir", state, "--host-id", hostId, "--no-wait"];
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

test("the logs make run writes are not readable by other users", async () => {
  for (const name of ["backend.log", "agent.log"]) {
    const mode = statSync(`${dataDir}/log/${name}`).mode & 0o777;
    expect(mode & 0o007, `${name} mode ${mode.toString(8)}`).toBe(0);
  }
  expect(statSync(`${dataDir}/log`).mode & 0o007).toBe(0);
});
