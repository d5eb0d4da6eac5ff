// SPDX-License-Identifier: Apache-2.0
// Sign in through the login page once and keep the session for the other tests.
import { test as setup, expect } from "@playwright/test";
import { adminPassword } from "./helpers";

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
