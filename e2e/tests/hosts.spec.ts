// SPDX-License-Identifier: Apache-2.0
// The host list: this machine's agent registers, shows as online with its real kernel, and the
// hardware PMU shows as unavailable with a reason (these VMs have none) rather than a number.
import { test, expect } from "@playwright/test";
import { execSync } from "node:child_process";
import { api, hostname, readyHost, thisHostId } from "./helpers";

test("this host appears online with its kernel release", async ({ page }) => {
  await readyHost();
  await page.goto("/");
  await expect(page.getByRole("heading", { name: "Hosts" })).toBeVisible();
  const row = page.getByRole("row").filter({ hasText: hostname });
  await expect(row).toContainText(execSync("uname -r").toString().trim());
  await expect(row).toContainText(/online/i);
});

test("a metric the host cannot measure is shown unavailable with its reason", async ({ page }) => {
  const ctx = await api();
  const hostId = await thisHostId(ctx);
  const host = await (await ctx.get(`/api/v1/hosts/${hostId}`)).json();
  const pmu = host.capabilities.find((c: { name: string }) => c.name === "hardware_pmu");
  expect(pmu, "agent reports the hardware_pmu capability").toBeTruthy();
  test.skip(pmu.available, "this machine has a hardware PMU");
  await page.goto("/");
  await expect(page.getByText(pmu.detail, { exact: false }).first()).toBeAttached();
});
