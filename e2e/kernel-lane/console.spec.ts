// SPDX-License-Identifier: Apache-2.0
// What a user of `make run` + `make lane` sees: this machine and the 6.1 guest side by side in the
// host list, the guest's test module in its code tree, and one of the module's functions drawn as
// a CFG whose instructions the guest's agent decodes on demand. Cross-checked against the API.
// Then the SRE's path on the guest's kernel: lane_mix → Optimize (exact kprobe counts) → Request →
// another user approves → Install (through hotpath.ko) → the before/after table, its times labelled
// as emulation → Revert. checks.py made the approver (LANE_APPROVER) and watches the guest meanwhile:
// the guest's agent kills itself at this install's redirect (guest/init, LANE_AGENT_KILL_AT), so the
// install the page waits for is the one the backend sends again to the restarted agent, and checks.py
// checks the kernel clean in between, the copy running, and lane_mix's own entry back after the revert.
// Last, a staged roll-out of a kernel plan (issue 19): an approved plan of lane_mix rolled out from the
// console to the guest's kernel build, the guest the canary (a real install through hotpath.ko, seen
// running in the guest by mixwatch), then a wave of two scripted agents — fakes named scripted-kfake…,
// stand-ins for more hosts of the guest's build, which a second guest would be too heavy to be here —
// and Revert everywhere; this machine's own host (another kernel build) is never part of it.
import { expect, request, test, type Browser, type Page } from "@playwright/test";
import { readFileSync, statSync } from "node:fs";
import { saidSo, startScripted, stopScripted, type Scripted } from "../tests/scripted";

const guest = process.env.LANE_GUEST_HOSTNAME ?? "hotpath-lane";
const self = process.env.LANE_HOST_HOSTNAME ?? "";
const release = process.env.LANE_RELEASE ?? "";
const password = process.env.HOTPATH_E2E_ADMIN_PASSWORD ?? "";
const approver = process.env.LANE_APPROVER ?? "";
const approverPassword = process.env.LANE_APPROVER_PASSWORD ?? "";
// The guest's results channel (checks.py's --results): mixwatch's "@@info" lines say where lane_mix ran.
const results = process.env.LANE_RESULTS ?? "";
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

/** The "@@info key=value ..." lines of the guest's results channel from byte offset `from` on. */
function infos(from: number): Record<string, string>[] {
  const text = readFileSync(results, "utf8").slice(from);
  return text
    .replace(/\r/g, "")
    .split("\n")
    .filter((l) => l.startsWith("@@info "))
    .map((l) =>
      Object.fromEntries(
        l
          .slice(7)
          .split(/\s+/)
          .filter((w) => w.includes("="))
          .map((w) => w.split("=", 2)),
      ),
    );
}

/** An address mixwatch wrote (a signed decimal: the kernel's addresses are negative as a long). */
const addr = (decimal: string) => BigInt.asUintN(64, BigInt(decimal));

test("kernel roll-out: lane_mix rolled out to the guest's build, the guest the canary, fakes the next wave, reverted everywhere", async ({
  page,
  browser,
  baseURL,
}) => {
  test.setTimeout(8 * HANG_MS);
  expect(approver, "checks.py names the approver it made (LANE_APPROVER)").not.toBe("");
  expect(results, "checks.py names the guest's results channel (LANE_RESULTS)").not.toBe("");
  const hang = expect.configure({ timeout: HANG_MS });
  const { api, guestHost, fn } = await guestFunction(baseURL, "lane_mix");
  const hosts = (await (await api.get("/api/v1/hosts")).json()) as {
    id: string;
    hostname: string;
    online: boolean;
    kernel_build_id: string;
  }[];
  const selfHost = hosts.find((h) => h.hostname === self && h.online);
  expect(selfHost, "this machine's own host is online").toBeTruthy();
  expect(selfHost!.kernel_build_id, "this machine runs another kernel build than the guest").not.toBe(
    guestHost.kernel_build_id,
  );

  // The plan over REST, as the flow before made one in the page: lane_mix from exact counts, requested by admin and
  // approved by the second user.
  const base = `/api/v1/hosts/${guestHost.id}/plans`;
  // The flow before this test measured lane_mix around its install and revert: its measurements have ended
  // before this plan's own exact counts are taken (hang bound).
  const active = async () =>
    (
      (await (await api.get(`/api/v1/hosts/${guestHost.id}/measurements?limit=50`)).json()) as {
        id: string;
        state: string;
      }[]
    )
      .filter((m) => !["target_exited", "stopped", "failed"].includes(m.state))
      .map((m) => `${m.id} ${m.state}`);
  await hang.poll(active, { message: "the guest's earlier measurements have ended", timeout: HANG_MS }).toEqual([]);
  const made = await api.post(base, { data: { target: "kernel", function_id: fn.id, seconds: 5 } });
  expect(made.status(), await made.text()).toBe(202);
  const planId = (await made.json()).id as string;
  const planOf = async (host: string, id: string) =>
    (await (await api.get(`/api/v1/hosts/${encodeURIComponent(host)}/plans/${id}`)).json()) as {
      state: string;
      error: string | null;
      derived_from: string | null;
      install_detail: { heap?: string; heap_bytes?: number } | null;
    };
  await hang
    .poll(async () => (await planOf(guestHost.id, planId)).state, { message: "the plan is made", timeout: HANG_MS })
    .toMatch(/^(ready|failed)$/);
  const plan = await planOf(guestHost.id, planId);
  expect(plan.state, `the plan's error: ${plan.error}`).toBe("ready");
  expect((await api.post(`${base}/${planId}/request`)).status()).toBe(200);
  const anon = await request.newContext({ baseURL });
  const login = await anon.post("/api/v1/auth/login", { data: { username: approver, password: approverPassword } });
  expect(login.status()).toBe(200);
  const approverApi = await request.newContext({
    baseURL,
    extraHTTPHeaders: { Authorization: `Bearer ${(await login.json()).access_token}` },
  });
  const ok = await approverApi.post(`${base}/${planId}/approve`);
  expect(ok.status(), await ok.text()).toBe(200);
  await approverApi.dispose();
  await anon.dispose();

  // Refused over REST: a roll-out naming this machine's host, of another kernel build, with the reason; no
  // roll-out is made.
  const refused = await api.post("/api/v1/rollouts", {
    data: { host_id: guestHost.id, plan_id: planId, hosts: [guestHost.id, selfHost!.id], wave_sizes: [1] },
  });
  expect(refused.status(), "a roll-out naming a host of another build").toBe(409);
  expect((await refused.json()).detail).toContain(
    `${selfHost!.id}: its kernel build is ${selfHost!.kernel_build_id}, not the plan's ${guestHost.kernel_build_id}`,
  );
  expect(await (await api.get(`/api/v1/rollouts?plan_id=${planId}`)).json()).toEqual([]);

  // Two fakes of the guest's build: the backend tests' scripted agent, reporting the guest's kernel build id
  // and release (their catalog is their own scripted one: they install nothing anywhere).
  const run = Date.now().toString(36);
  const fakes: Scripted[] = [];
  try {
    for (const n of [1, 2])
      fakes.push(
        await startScripted(
          api,
          {
            id: `scripted-kfake${n}-${run}`,
            kernelTag: `kernel-lane-${run}`,
            kernelBuildId: guestHost.kernel_build_id,
            kernelRelease: release,
            note: `fake agent scripted-kfake${n}-${run} of e2e/kernel-lane/console.spec.ts (the guest's kernel build)`,
          },
          HANG_MS,
        ),
      );
    for (const f of fakes) expect(f.buildId, `${f.id} reports the guest's build`).toBe(guestHost.kernel_build_id);

    // From the console: the approved plan's page → Roll out to the fleet, waves 1, 2.
    await signIn(page, "admin", password);
    await page.goto(`/hosts/${guestHost.id}/plans/${planId}`);
    await hang(page.getByTestId("plan-state")).toHaveText("approved");
    await expect(page.getByRole("heading", { name: "Roll out to the fleet" })).toBeVisible();
    const form = page.getByRole("form", { name: "Start a roll-out" });
    await form.getByRole("textbox", { name: /Wave sizes/ }).fill("1, 2");
    await form.getByRole("spinbutton", { name: /Before\/after window/ }).fill("2");
    await form.getByRole("button", { name: "Start roll-out" }).click();
    await hang(page).toHaveURL(/\/rollouts\/[0-9a-f-]{36}$/);
    const rolloutId = page.url().replace(/^.*\/rollouts\//, "");
    await expect(page.getByRole("heading", { name: "Roll-out of a kernel plan" })).toBeVisible();
    const from = statSync(results).size;

    // The canary: the guest, with the approved plan itself, installed through hotpath.ko; mixwatch in the
    // guest sees lane_mix's call of lane_here return into the reported heap (the copy runs).
    const canary = page.getByRole("table", { name: "Canary · 1 host" });
    await hang(canary.locator(`tr[data-host="${guestHost.id}"]`)).toContainText("installed", {
      timeout: 3 * HANG_MS,
    });
    const installed = await planOf(guestHost.id, planId);
    expect(installed.state, installed.error ?? "").toBe("installed");
    const heap = BigInt(installed.install_detail?.heap ?? "0");
    const heapEnd = heap + BigInt(installed.install_detail?.heap_bytes ?? 0);
    expect(heap >= 0xffff800000000000n, `the heap ${installed.install_detail?.heap} is kernel memory`).toBe(true);
    await hang
      .poll(
        () =>
          infos(from).some(
            (i) =>
              i["mixwatch-where"] !== undefined &&
              addr(i["mixwatch-where"]) >= heap &&
              addr(i["mixwatch-where"]) < heapEnd,
          ),
        { message: "lane_mix running in the canary's copy in the guest", timeout: HANG_MS },
      )
      .toBe(true);

    // Then the wave of two fakes, each with its per-host plan derived from the approved one; completed.
    await hang(page.getByTestId("rollout-state")).toHaveText("completed", { timeout: 2 * HANG_MS });
    await hang(page.getByTestId("rollout-progress")).toHaveText("3 of 3 hosts answered: 3 installed");
    const wave = page.getByRole("table", { name: "Wave 1 · 2 hosts" });
    for (const f of fakes) await hang(wave.locator(`tr[data-host="${f.id}"]`)).toContainText("installed");
    await expect(page.locator(`tr[data-host="${selfHost!.id}"]`), "this machine's host is never in it").toHaveCount(0);
    const ro = (await (await api.get(`/api/v1/rollouts/${rolloutId}`)).json()) as {
      kind: string;
      build_id: string;
      code_sha256: string;
      hosts: { host_id: string; wave: number; state: string; plan_id: string }[];
    };
    expect([ro.kind, ro.build_id]).toEqual(["kernel", guestHost.kernel_build_id]);
    expect(ro.hosts.map((h) => [h.host_id, h.wave, h.state])).toEqual([
      [guestHost.id, 0, "installed"],
      ...fakes.map((f) => [f.id, 1, "installed"]),
    ]);
    expect(ro.hosts[0]!.plan_id, "the canary installs the approved plan itself").toBe(planId);
    for (const f of fakes) {
      const mine = ro.hosts.find((h) => h.host_id === f.id)!;
      const derived = await planOf(f.id, mine.plan_id);
      expect([derived.state, derived.derived_from], `${f.id}'s per-host plan`).toEqual(["installed", planId]);
      // What the fake was sent: the kernel plan of lane_mix for the guest's build, with the approved code.
      const said = await saidSo(f, "installed", HANG_MS);
      expect(said).toMatchObject({
        installed: mine.plan_id,
        root: "lane_mix",
        code_sha256: ro.code_sha256,
        target: { kind: "kernel", build_id: guestHost.kernel_build_id },
      });
    }
    const trail = (await (await api.get(`/api/v1/rollouts/${rolloutId}/audit`)).json()) as { action: string }[];
    for (const a of [
      "rollout_start",
      "rollout_host_installing",
      "rollout_wave",
      "rollout_host_installed",
      "rollout_complete",
    ])
      expect(
        trail.map((t) => t.action),
        a,
      ).toContain(a);
    await hang(page.getByTestId("rollout-audit")).toContainText("complete");

    // Revert everywhere: the guest's copy is reverted (lane_mix back at its own address, ftrace lets go,
    // no round of mixwatch wrong), and each fake's.
    const before = statSync(results).size;
    await page.getByRole("button", { name: "Revert everywhere" }).click();
    await hang(page.getByTestId("rollout-state")).toHaveText("reverted everywhere", { timeout: 2 * HANG_MS });
    for (const h of ro.hosts) expect((await planOf(h.host_id, h.plan_id)).state, h.host_id).toBe("reverted");
    for (const f of fakes)
      expect(await saidSo(f, "reverted", HANG_MS)).toEqual({
        reverted: ro.hosts.find((h) => h.host_id === f.id)!.plan_id,
      });
    const orig = infos(0).find((i) => i["mixwatch-orig-where"] !== undefined);
    expect(orig, "mixwatch's first line").toBeTruthy();
    await hang
      .poll(
        () =>
          infos(before).some(
            (i) => i["mixwatch-traced"] === "no" && i["mixwatch-where"] === orig!["mixwatch-orig-where"],
          ),
        { message: "lane_mix at its own address again, not listed by ftrace", timeout: HANG_MS },
      )
      .toBe(true);
    const last = infos(from)
      .filter((i) => i["mixwatch-wrong"] !== undefined)
      .pop();
    expect(last?.["mixwatch-wrong"], "mixwatch's wrong rounds").toBe("0");
    await hang(page.getByTestId("rollout-audit")).toContainText("reverted");
  } finally {
    await Promise.all(fakes.map(stopScripted));
    for (const f of fakes) await api.delete(`/api/v1/hosts/${encodeURIComponent(f.id)}`);
  }
});
