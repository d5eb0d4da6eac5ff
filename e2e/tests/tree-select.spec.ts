// SPDX-License-Identifier: Apache-2.0
// Multi-select of code resources in the tree (kperfmon's visis): vfs_read ticked in the live kernel's
// tree rides in the URL to the kernel's measure page, where it arrives picked with its blocks.
import { test, expect } from "@playwright/test";
import { openHost, readyHost } from "./helpers";

test("vfs_read ticked in the tree arrives picked on the kernel's measure page", async ({ page }) => {
  await readyHost();
  await openHost(page);
  await page.getByRole("tab", { name: "Code" }).click();
  await page.getByRole("searchbox", { name: "Search functions" }).fill("vfs_read");
  const tick = page.getByRole("checkbox", { name: "Select vfs_read for measurement", exact: true });
  // The tick is URL state: the box shows it once the router has applied the new URL, a moment after the
  // click (check() would fail on that moment under load), so the click is followed by waiting for it.
  await tick.click();
  await expect(tick).toBeChecked();
  const bar = page.getByRole("region", { name: "Selected functions" });
  await expect(bar).toContainText("1 selected");
  await expect(page).toHaveURL(/[?&]pick=\d+/);
  // The selection is view state: a reload keeps it.
  await page.reload();
  await expect(page.getByRole("checkbox", { name: "Select vfs_read for measurement", exact: true })).toBeChecked();

  await page.getByRole("button", { name: "Measure selected" }).click();
  await expect(page).toHaveURL(/\/measure\?target=kernel&fn=\d+/);
  await expect(page.getByRole("heading", { name: "Measure the kernel" })).toBeVisible();
  const picked = page.getByRole("list", { name: "Selected resources" });
  await expect(picked.getByRole("listitem")).toHaveCount(1);
  await expect(picked.getByRole("listitem")).toContainText("vfs_read");
  await expect(page.getByLabel("Blocks of vfs_read")).toBeChecked();
  await expect(page.getByRole("button", { name: "Start" })).toBeEnabled();
});
