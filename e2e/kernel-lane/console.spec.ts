// SPDX-License-Identifier: Apache-2.0
// What a user of `make run` + `make lane` sees: this machine and the 6.1 guest side by side in the
// host list, the guest's test module in its code tree, and one of the module's functions drawn as
// a CFG whose instructions the guest's agent decodes on demand. Cross-checked against the API.
// Then the SRE's path on the guest's kernel: lane_mix → Optimize (exact kprobe counts) → Request →
// another user approves → Install (through hotpath.ko) → the before/after table, its times labelled
// as emulation → Revert. checks.py made the approver (LANE_APPROVER) and watches the guest meanwhile.
import { expect, request, test, type Browser, type Page } from "@playwright/test";

const guest = process.env.LANE_GUEST_HOSTNAME ?? "hotpath-lane";
const self = process.env.LANE_HOST_HOSTNAME ?? "";
const release = process.env.LANE_RELEASE ?? "";
const password = process.env.HOTPATH_E2E_ADMIN_PASSWORD ?? "";
const approver = process.env.LANE_APPROVER ?? "";
const approverPassword = process.env.LANE_APPROVER_PASSWORD ?? "";
// Waits for what the emulated guest is bound to do (plan, windows, install): a bound for a hang.
const HANG_MS = 240_000;

async function signIn(page: Page, username: string, secret: string) {
  await page.goto("/");
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(secret);
  await page.getByRole("button", { name: "Sign in" }).click();
  // The first screen: the fleet page once more than one host has connected (here the guest and this
  // machine), else the host list.
  await expect(page.getByRole("heading", { name: /^(Fleet|Hosts)$/ })).toBeVisible();
}

/** The admin's API context, the online guest host and its hotpath_lane function NAME, from the REST API. */
async function guestFunction(baseURL: string | undefined, name: string) {
  const anon = await request.newContext({ baseURL });
  const login = await (await anon.post("/api/v1/auth/login", { data: { username: "admin", password } })).json();
  const api = await request.newContext({
    baseURL,
    extraHTTPHeaders: { Authorization: `Bearer ${login.access_token}` },
  });
  const hosts = await (await api.get("/api/v1/hosts")).json();
  const guestHost = hosts.find((h: { hostname: string; online: boolean }) => h.hostname === guest && h.online);
  expect(guestHost, "the guest is an online host").toBeTruthy();
  const fns = await (await api.get(`/api/v1/hosts/${guestHost.id}/functions?module=hotpath_lane&q=${name}`)).json();
  const fn = fns.items.find((f: { name: string }) => f.name === name);
  expect(fn, `${name} is in the guest's catalog`).toBeTruthy();
  return { api, guestHost, fn };
}

test("both hosts side by side, and the guest's module code in its tree", async ({ page, baseURL }) => {
  const { guestHost, fn } = await guestFunction(baseURL, "lane_step");

  await signIn(page, "admin", password);

  // Two hosts on two kernel builds: the fleet page is the first screen and shows each in its own group,
  // headed by its kernel release, online.
  await expect(page.getByRole("heading", { name: "Fleet" })).toBeVisible();
  const guestGroup = page.getByRole("region").filter({ has: page.getByRole("heading", { name: release }) });
  await expect(guestGroup.getByRole("row").filter({ hasText: guest })).toContainText(/online/i);
  const selfGroup = page.getByRole("region").filter({ has: page.getByRole("row").filter({ hasText: self }) });
  await expect(selfGroup.getByRole("heading").first()).not.toContainText(release);
  await page.getByRole("link", { name: "Host list" }).click();
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

async function approveAs(browser: Browser, baseURL: string | undefined, url: string) {
  const context = await browser.newContext({ baseURL, storageState: { cookies: [], origins: [] } });
  const other = await context.newPage();
  await signIn(other, approver, approverPassword);
  await other.goto(url);
  await expect(other.getByTestId("plan-state")).toHaveText("requested");
  await other.getByRole("button", { name: "Approve" }).click();
  await expect(other.getByTestId("plan-state")).toHaveText("approved");
  await context.close();
}

test("kernel flow: lane_mix optimized, approved by another user, installed, compared, reverted", async ({
  page,
  browser,
  baseURL,
}) => {
  test.setTimeout(4 * HANG_MS);
  expect(approver, "checks.py names the approver it made (LANE_APPROVER)").not.toBe("");
  const { api, guestHost, fn } = await guestFunction(baseURL, "lane_mix");

  await signIn(page, "admin", password);
  await page.goto(`/hosts/${guestHost.id}/functions/${fn.id}`);
  await expect(page.getByRole("heading", { name: "lane_mix" })).toBeVisible();
  await page.getByRole("button", { name: "Optimize…" }).click();
  // The page moves to the plan once the backend answered the POST ("Asking the agent…" meanwhile): a
  // backend sharing a loaded machine has no fixed time for that (a fresh-clone run at load 10 waited
  // more than 30 s), so the hang bound applies, as to every wait on the stack here.
  await expect(page).toHaveURL(/\/plans\/[0-9a-f-]{36}$/, { timeout: HANG_MS });
  const planUrl = new URL(page.url()).pathname;
  const state = page.getByTestId("plan-state");
  await expect(state).toHaveText("ready", { timeout: HANG_MS });
  await expect(page.getByText("exact (probes)")).toBeVisible();

  await page.getByRole("button", { name: "Request approval" }).click();
  await expect(state).toHaveText("requested");
  await expect(page.getByRole("button", { name: "Approve" })).toBeDisabled();
  const own = await api.post(`/api/v1${planUrl}/approve`);
  expect(own.status(), "admin approving its own request").toBe(403);
  await approveAs(browser, baseURL, planUrl);
  await page.reload();
  await expect(state).toHaveText("approved");

  await page.getByRole("button", { name: "Install" }).click();
  await expect(state).toHaveText("installed", { timeout: HANG_MS });
  const table = page.getByTestId("before-after");
  const window = table.getByRole("row").filter({ hasText: "Window" }).locator("td");
  await expect(window.nth(1)).toHaveText(/\d+\.\d s, [1-9]\d* calls/, { timeout: HANG_MS });
  await expect(window.nth(0)).toHaveText(/[1-9]\d* calls/);
  const wall = table.getByRole("row").filter({ hasText: "Wall time per call" }).locator("td");
  await expect(wall.nth(0)).toContainText("under emulation, not a performance figure");
  await expect(wall.nth(1)).toContainText("under emulation, not a performance figure");
  await expect(page.getByTestId("emulated")).toContainText("QEMU");

  await page.getByRole("button", { name: "Revert" }).click();
  await expect(state).toHaveText("reverted", { timeout: HANG_MS });
});
