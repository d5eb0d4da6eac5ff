// SPDX-License-Identifier: Apache-2.0
// Sign in through the login page once and keep the session for the other tests.
import { test as setup, expect } from "@playwright/test";
import { adminPassword, api, thisHostId, waitForCatalog } from "./helpers";

setup("sign in as admin", async ({ page }) => {
  await page.goto("/");
  await page.getByLabel("Username").fill("admin");
  await page.getByLabel("Password").fill("wrong-password");
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByText("Incorrect username or password")).toBeVisible();

  await page.getByLabel("Password").fill(adminPassword);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Hosts" })).toBeVisible();
  await page.context().storageState({ path: "test-results/.auth/admin.json" });
});

// Every test of this machine's host needs its kernel catalog stored: 61k functions, which the agent
// parses and uploads in 30-40 s alone, and minutes on a machine whose cores other work takes. Waiting
// for it once here, with a bound that only a hang reaches, keeps that load out of each test's own limit.
setup("this host's catalog is stored", async () => {
  setup.setTimeout(900_000);
  const ctx = await api();
  const end = Date.now() + 870_000;
  let hostId = "";
  while (!hostId) {
    try {
      hostId = await thisHostId(ctx); // the agent enrols and connects after the backend is up
    } catch (e) {
      if (Date.now() > end) throw e;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  await waitForCatalog(ctx, hostId, Math.max(1000, end - Date.now()));
});
