// SPDX-License-Identifier: Apache-2.0
// What a user of `make run` + `make lane` sees: this machine and the 6.1 guest side by side in the
// host list, the guest's test module in its code tree, and one of the module's functions drawn as
// a CFG whose instructions the guest's agent decodes on demand. Cross-checked against the API.
import { expect, request, test } from "@playwright/test";

const guest = process.env.LANE_GUEST_HOSTNAME ?? "hotpath-lane";
const self = process.env.LANE_HOST_HOSTNAME ?? "";
const release = process.env.LANE_RELEASE ?? "";
const password = process.env.HOTPATH_E2E_ADMIN_PASSWORD ?? "";

test("both hosts side by side, and the guest's module code in its tree", async ({ page, baseURL }) => {
  const anon = await request.newContext({ baseURL });
  const login = await (await anon.post("/api/v1/auth/login", { data: { username: "admin", password } })).json();
  const api = await request.newContext({
    baseURL,
    extraHTTPHeaders: { Authorization: `Bearer ${login.access_token}` },
  });
  const hosts = await (await api.get("/api/v1/hosts")).json();
  const guestHost = hosts.find((h: { hostname: string; online: boolean }) => h.hostname === guest && h.online);
  expect(guestHost, "the guest is an online host").toBeTruthy();
  const fns = await (await api.get(`/api/v1/hosts/${guestHost.id}/functions?module=hotpath_lane&q=lane_step`)).json();
  const fn = fns.items.find((f: { name: string }) => f.name === "lane_step");
  expect(fn, "lane_step is in the guest's catalog").toBeTruthy();

  await page.goto("/");
  await page.getByLabel("Username").fill("admin");
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Hosts" })).toBeVisible();

  const guestRow = page.getByRole("row").filter({ hasText: guest });
  await expect(guestRow).toContainText(release);
  await expect(guestRow).toContainText(/online/i);
  const selfRow = page.getByRole("row").filter({ hasText: self });
  await expect(selfRow).toContainText(/online/i);

  await guestRow.getByRole("link", { name: guest }).click();
  await page.getByRole("tab", { name: "Code" }).click();
  await page.getByRole("searchbox", { name: "Search functions" }).fill("lane_step");
  await expect(page.getByRole("treeitem", { name: /hotpath_lane/ }).first()).toBeVisible();
  const item = page.getByRole("treeitem", { name: /\blane_step\b/ }).first();
  await expect(item).toBeVisible();
  await item.getByRole("link", { name: "lane_step", exact: true }).click();

  await expect(page.getByRole("heading", { name: "lane_step" })).toBeVisible();
  await expect(page.getByTestId("cfg-block")).toHaveCount(fn.block_count);
  await page.getByTestId("cfg-block").filter({ hasText: fn.address_hex }).first().click();
  const panel = page.getByRole("region", { name: "Instructions" });
  await expect(panel).toBeVisible();
  await expect(panel).toContainText(fn.address_hex);
});
