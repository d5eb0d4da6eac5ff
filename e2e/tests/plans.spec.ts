// SPDX-License-Identifier: Apache-2.0
// Plans end to end with the real agent, backend and Chromium: a program gcc builds here (the agent's
// threads fixture, whose threads call pr_root forever and exit on any wrong result) is attached; the
// console's Optimize makes a plan from exact block counts (inline counters where a function can be counted
// so, uprobes in the same window where not; progress, heatmaps, chain table, emitted
// code); admin requests approval and cannot approve it (button disabled, API 403); a second user with
// the approver role approves; Install puts the copy into the process (its memfd mapping in
// /proc/PID/maps, the entry jumping to it, every result still right) with the before/after table in
// units; Revert brings the original bytes back. A plan whose process exited is stale and cannot be
// installed. SQLite's driver is optimized both ways: one root from its function page, and its whole hot
// set (chosen by PC samples; members that call nothing counted inline, the others' samples scaled to
// those counts, an estimate) from its process page, each approved, installed, compared and reverted. Those installs
// leave the guard off (they check the install itself); a guarded install of the fixture's plan shows the
// interleaved before/after (the sampled share of the plan's code, original against installed, with its
// interval), is compared again and reverted, or, when the guard finds it slower, is reverted by the
// system with the figures. On the kernel, Optimize makes an estimate plan from PC samples, and Install is
// refused with the agent's reason (this kernel forbids code replacement).
import {
  test,
  expect,
  type APIRequestContext,
  type Browser,
  type Locator,
  type Page,
  type Response,
} from "@playwright/test";
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { apiAs, baseURL, readMem, readyHost, startReadLoop, startReadyProgram, waitCommandDone } from "./helpers";

const fixtures = join(__dirname, "..", "..", "agent", "tests", "fixtures");
const approver = { username: `approver-${Date.now()}`, password: "approver-password-e2e" };
// Where the plan view's picture goes: docs/img when HOTPATH_E2E_SCREENSHOTS names it, else the results.
const shots = process.env.HOTPATH_E2E_SCREENSHOTS ?? join(__dirname, "..", "test-results");

let ctx: APIRequestContext;
let hostId = "";
let program = "";
let buildDir = "";
let approverApi: APIRequestContext;

test.beforeAll(async () => {
  ({ ctx, hostId } = await readyHost());
  buildDir = mkdtempSync(join(tmpdir(), "hotpath-e2e-plan-"));
  program = join(buildDir, "threads");
  // Without the unwinder check: the install's measurement windows time pr_root with uretprobes, which
  // replace return addresses on the stack, so backtrace() inside would see other frames.
  execFileSync("gcc", [
    "-O2",
    "-g",
    "-pthread",
    "-Wl,--build-id",
    "-DPR_NO_UNWIND",
    `-I${fixtures}`,
    "-o",
    program,
    join(fixtures, "threads.c"),
  ]);
  // The second user, with the approver role, made through the admin API.
  const made = await ctx.post("/api/v1/users", { data: { ...approver, role: "approver" } });
  expect(made.status(), await made.text()).toBe(201);
  approverApi = await apiAs(approver.username, approver.password);
});

test.afterAll(() => {
  if (buildDir) rmSync(buildDir, { recursive: true, force: true });
});

/** The fixture running with `threads` worker threads, once every thread has its table of results. */
function startFixture(threads = 2) {
  return startReadyProgram(program, [String(threads)]);
}

// How long a wait for what is bound to happen (a state the server reaches, a page that shows it) may
// take before it is called a hang: not a speed check, a passing test goes on as soon as it holds. In
// three loaded runs of the whole suite at once (load average ~20 on 2 cores) a hot set's plan page
// (120 functions) took more than the default 20 s to show a state change, and an
// attach waited a minute for the agent to start it.
const HANG_MS = 90_000;
// A whole flow's own limit (attach, plan, approve, install, compare, revert): each of its waits is bound
// by HANG_MS or by the agent's progress, so a hang fails there, with what was last seen; this limit only
// catches a flow that keeps making progress forever. At load average ~20 (run s16b) the guarded flow
// took over 5 minutes while every step progressed.
const FLOW_MS = 20 * 60_000;
// The window after an install ends when the agent has started its measurement (the backend waits up to
// 60 s for that), measured 5 s, and stopped it (up to 60 s more): at load the stop took 30 s (fresh-clone
// run s18a), past a fixed 60 s. Beyond the backend's own bounds it is a hang.
const AFTER_WINDOW_MS = (60 + 5 + 60) * 1000 + HANG_MS;

/** Wait until the plan's window after its install has stopped (within the backend's bounds on it). */
async function afterWindowStopped(planId: string) {
  await expect
    .poll(
      async () => (await (await ctx.get(`/api/v1/hosts/${hostId}/plans/${planId}`)).json()).comparison?.after?.state,
      { timeout: AFTER_WINDOW_MS },
    )
    .toBe("stopped");
}

function waitCommand(path: string, timeoutMs = HANG_MS) {
  return waitCommandDone(ctx, path, timeoutMs);
}

/** The plan's state once it leaves `state`. An install of a whole hot set takes as long as its functions
 * take to copy, check and splice, which a fixed bound cannot know; the wait is bounded instead by the
 * agent's progress: it fails only when the plan's command reports nothing new (state, fraction, step)
 * for HANG_MS. */
async function stateAfter(planId: string, state: string): Promise<string> {
  let seen = "";
  let since = Date.now();
  for (;;) {
    const p = await (await ctx.get(`/api/v1/hosts/${hostId}/plans/${planId}`)).json();
    if (p.state !== state) return p.state;
    const id = p.install_command ?? p.revert_command;
    const c = id ? await (await ctx.get(`/api/v1/hosts/${hostId}/commands/${id}`)).json() : null;
    const now = JSON.stringify([id, c?.state, c?.progress, c?.message]);
    if (now !== seen) [seen, since] = [now, Date.now()];
    if (Date.now() - since > HANG_MS) throw new Error(`plan ${state} with no progress for ${HANG_MS} ms: ${now}`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/** Attach the process through the API (the console has no attach form yet); its target id. */
async function attach(pid: number): Promise<string> {
  const res = await ctx.post(`/api/v1/hosts/${hostId}/targets`, { data: { pid } });
  expect(res.status(), await res.text()).toBe(202);
  const cmd = await waitCommand(`/api/v1/hosts/${hostId}/commands/${(await res.json()).id}`);
  expect(cmd.state, JSON.stringify(cmd)).toBe("done");
  const targets = await (await ctx.get(`/api/v1/hosts/${hostId}/targets`)).json();
  const t = targets.find((x: { pid: number; state: string }) => x.pid === pid && x.state === "attached");
  expect(t, JSON.stringify(targets)).toBeTruthy();
  return t.id;
}

/** A function of the attached process, as the console names it, once its module's catalog is stored. */
async function functionNamed(target: string, name: string) {
  const end = Date.now() + 90_000;
  for (;;) {
    const page = await (await ctx.get(`/api/v1/hosts/${hostId}/functions?q=${name}&target=${target}`)).json();
    const fn = (page.items ?? []).find((f: { name: string }) => f.name === name);
    if (fn)
      return (await (await ctx.get(`/api/v1/hosts/${hostId}/functions/${fn.id}?target=${target}`)).json()).function;
    if (Date.now() > end) throw new Error(`${name} not in the catalog of ${target}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

const prRoot = (target: string) => functionNamed(target, "pr_root");

/** Attach the process from the host page's Targets panel, as an SRE does; its target id. */
async function attachFromConsole(page: Page, pid: number): Promise<string> {
  await page.goto(`/hosts/${hostId}`);
  await page.getByLabel("Process id or command name").fill(String(pid));
  await page.getByRole("button", { name: "Attach", exact: true }).click();
  const row = page.locator("section.targets tr").filter({ hasText: `(pid ${pid})` });
  await expect(row.locator("td").nth(2)).toHaveText(/^attached/, { timeout: HANG_MS });
  return (await row.getAttribute("data-target"))!;
}

/** An address written in hex, with or without 0x. */
const hex = (s: string): bigint => BigInt(s.startsWith("0x") ? s : `0x${s}`);

async function approverPage(browser: Browser, url: string): Promise<Page> {
  const context = await browser.newContext({ baseURL, storageState: { cookies: [], origins: [] } });
  const page = await context.newPage();
  await page.goto("/");
  await page.getByLabel("Username").fill(approver.username);
  await page.getByLabel("Password").fill(approver.password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Hosts" })).toBeVisible({ timeout: HANG_MS });
  await page.goto(url);
  return page;
}

const planState = (page: Page) => page.getByTestId("plan-state");

/** Clicks "Optimize…" on a function's page and waits until the console has opened the new plan; its path.
 * The click's POST stores the plan and its command and answers at once (202): the agent makes the plan
 * afterwards, so neither wait depends on the plan's workload and both keep expect's default bound. The
 * answer is checked first, so a refusal or a stalled backend reads as such, not as a URL that stayed. */
async function clickOptimize(page: Page, button = "Optimize…"): Promise<string> {
  let answer: Response | undefined;
  const made = (r: Response) =>
    r.request().method() === "POST" && /^\/api\/v1\/hosts\/[^/]+\/plans$/.test(new URL(r.url()).pathname);
  const listen = (r: Response) => {
    if (made(r)) answer = r;
  };
  page.on("response", listen);
  try {
    await page.getByRole("button", { name: button }).click();
    await expect
      .poll(() => answer?.status(), { message: `the POST of ${button} was answered`, timeout: HANG_MS })
      .toBeDefined();
  } finally {
    page.off("response", listen);
  }
  expect(answer!.status(), await answer!.text()).toBe(202);
  await expect(page).toHaveURL(/\/plans\/[0-9a-f-]{36}$/);
  return new URL(page.url()).pathname;
}

/** A plan's record (GET .../plans/ID, what the console polls: it does not carry the body) with its body
 * (GET .../plans/ID/body, read once under its entity tag) as `plan`. */
async function recordAndBody(planId: string) {
  const record = await (await ctx.get(`/api/v1/hosts/${hostId}/plans/${planId}`)).json();
  expect(record.plan, "the record does not carry the body").toBeUndefined();
  const body = await ctx.get(`/api/v1/hosts/${hostId}/plans/${planId}/body`);
  expect(body.status(), await body.text()).toBe(200);
  expect(body.headers()["etag"]).toBe(record.body_etag);
  return { ...record, plan: await body.json() };
}

/** What the plan page's "Counts" says of a plan (GET .../plans/ID), from its profile: an estimate where
 * some counts were sampled, else how the exact ones were taken. */
function countsLabel(made: { estimated: boolean; plan: { profile: { source: string } } }): string {
  const source = made.plan.profile.source;
  if (made.estimated) return "estimated (sampled)";
  if (!source.includes("(inline counters)")) return "exact (probes)";
  return source.includes("uprobes")
    ? "exact (inline counters; uprobes where a function cannot be counted inline)"
    : "exact (inline counters)";
}

/** Optimize… on a process function's page: progress while the agent counts the blocks, then the ready
 * plan, made from exact counts: inline counters for the functions that can be counted so (with `inline`,
 * at least one), uprobes in the same window for the others, as its profile's source says and the console
 * shows. The plan's path and id. */
async function optimizeFromConsole(page: Page, target: string, root: { id: string; name: string }, inline = false) {
  await page.setViewportSize({ width: 1400, height: 1000 });
  await page.goto(`/hosts/${hostId}/functions/${root.id}?target=${target}`);
  await expect(page.getByRole("heading", { name: root.name })).toBeVisible();
  const planUrl = await clickOptimize(page);
  await expect(page.getByRole("progressbar", { name: "Plan progress" })).toBeVisible();
  await expect(planState(page)).toHaveText("ready", { timeout: 150_000 });
  // Made from exact counts: both heatmaps, the root in the chain table, the emitted code verified.
  const made = await recordAndBody(planUrl.split("/").pop()!);
  const source: string = made.plan.profile.source;
  expect(made.plan.profile.estimated, source).toBe(false);
  if (inline) expect(source).toContain("s of exact block counts (inline counters) in process");
  await expect(page.getByText(countsLabel(made), { exact: true })).toBeVisible();
  await expect(page.getByTestId("heatmap-before")).toBeVisible();
  await expect(page.getByTestId("heatmap-after")).toBeVisible();
  const chains = page.getByTestId("chain-table").locator("tbody tr");
  await expect(chains.filter({ has: page.getByRole("cell", { name: root.name, exact: true }) }).first()).toBeVisible();
  // The taken branches before and after the layout, as the agent computed them from the counts.
  const t = made.plan.totals;
  await expect(page.getByTestId("taken-total")).toContainText(
    `${Math.round(t.taken_branches_before).toLocaleString("en-US")} → ${Math.round(t.taken_branches_after).toLocaleString("en-US")}`,
  );
  await expect(page.getByRole("heading", { name: /Emitted code \(\d+ bytes, verified\)/ })).toBeVisible();
  return { planUrl, planId: planUrl.split("/").pop()! };
}

/** Admin requests approval and cannot approve their own request (the button says why, the API refuses);
 * the approver approves from their own session; the page shows it approved. */
async function requestAndApprove(page: Page, browser: Browser, planUrl: string, planId: string) {
  await page.getByRole("button", { name: "Request approval" }).click();
  await expect(planState(page)).toHaveText("requested", { timeout: HANG_MS });
  const approve = page.getByRole("button", { name: "Approve" });
  await expect(approve).toBeDisabled();
  await expect(approve).toHaveAttribute("title", /another approver/);
  const own = await ctx.post(`/api/v1/hosts/${hostId}/plans/${planId}/approve`);
  expect(own.status()).toBe(403);
  const other = await approverPage(browser, planUrl);
  await expect(planState(other)).toHaveText("requested", { timeout: HANG_MS });
  await other.getByRole("button", { name: "Approve" }).click();
  await expect(planState(other)).toHaveText("approved", { timeout: HANG_MS });
  await other.context().close();
  await page.reload();
  await expect(planState(page)).toHaveText("approved", { timeout: HANG_MS });
}

/** One click installs (a window before, the install, a window after; the guard unchecked, so no
 * comparison runs between them); the before/after table fills in with figures and their units once the
 * window after has run. The table. */
async function installFromConsole(page: Page) {
  await page.getByRole("checkbox", { name: "Guard: revert if slower" }).setChecked(false);
  await page.getByRole("button", { name: "Install" }).click();
  await expect(planState(page)).toHaveText(/installing|installed/, { timeout: HANG_MS });
  expect(await stateAfter(/plans\/([0-9a-f-]{36})/.exec(page.url())![1], "installing")).toBe("installed");
  await expect(planState(page)).toHaveText("installed", { timeout: HANG_MS });
  const table = page.getByTestId("before-after");
  const calls = table.getByRole("row").filter({ hasText: "Calls per second" });
  await expect(calls.locator("td").nth(0)).toHaveText(/^\d+(\.\d+)? \/s$/, { timeout: HANG_MS });
  await expect(calls.locator("td").nth(1)).toHaveText(/^\d+(\.\d+)? \/s$/, { timeout: AFTER_WINDOW_MS });
  await expect(calls.locator("td").nth(2)).toHaveText(/^-?\d+\.\d%$/);
  await expect(table.getByRole("row").filter({ hasText: "Window" }).locator("td").nth(1)).toHaveText(
    /\d+\.\d s, [1-9]\d* calls/,
  );
  return table;
}

/** The plan page's picture, once the page shows the finished window after (the caller waited for it). */
async function screenshotPlan(page: Page, name: string) {
  await page.reload();
  await expect(planState(page)).toHaveText("installed");
  const after = page.getByTestId("before-after").getByRole("row").filter({ hasText: "Window" }).locator("td").nth(1);
  await expect(after).toHaveText(/[1-9]\d* calls/);
  mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: join(shots, name) });
}

/** The audit trail on the plan's page names every step and who took it. */
async function expectFullAudit(page: Page) {
  const audit = page.getByTestId("plan-audit");
  for (const what of [
    "create",
    "ready",
    "request",
    "approve",
    "install requested",
    "installed",
    "revert requested",
    "reverted",
  ]) {
    await expect(audit.getByRole("cell", { name: what, exact: true })).toHaveCount(1);
  }
  await expect(audit.getByRole("row").filter({ hasText: approver.username })).toContainText("approve");
}

test("a process's hot function: optimize, approve by another user, install, measure, revert", async ({
  page,
  browser,
}) => {
  test.setTimeout(FLOW_MS);
  const fx = await startFixture();
  const pid = fx.proc.pid!;
  try {
    const target = await attach(pid);
    const root = await prRoot(target);
    const entry = hex(root.address_hex);
    const original = readMem(pid, entry, 16);

    // Optimize… on the function page: progress while the agent counts the blocks (its leaves inline), then
    // the plan.
    const { planUrl, planId } = await optimizeFromConsole(page, target, root, true);
    const listing = page.getByTestId("code-listing");
    await expect(listing.locator("tbody tr").first()).toContainText("pr_root+0x0");
    await expect(listing).toContainText("<copy:pr_");
    // The original of the chosen member (the root) beside it, decoded by the agent.
    const originalCode = page.getByTestId("original-listing");
    await expect(originalCode.locator("tbody tr").first()).toContainText("pr_root+0x0");
    expect(await originalCode.locator("tbody tr").count()).toBeGreaterThan(5);
    // The root's CFG, laid out in the worker, coloured by the plan: hot blocks by chain, cold ones grey.
    const cfg = page.getByRole("img", { name: "pr_root: control-flow graph coloured by the plan" });
    await expect(cfg).toBeVisible();
    await expect(cfg.locator('[data-testid="plan-cfg-block"][data-hot="1"]').first()).toBeAttached();
    expect(await cfg.getByTestId("plan-cfg-block").count()).toBe(root.block_count);

    // Admin requests approval, and cannot approve their own request; the approver approves.
    await requestAndApprove(page, browser, planUrl, planId);

    // One click installs: a window before, the install, a window after.
    const table = await installFromConsole(page);
    const wall = table.getByRole("row").filter({ hasText: "Wall time per call" });
    await expect(wall.locator("td").nth(0)).toHaveText(/^\d+ ns$|^unavailable/);
    // Once the window after has stopped (its uprobe sits on the entry meanwhile), the entry jumps to the
    // copy, which is mapped from the plan's memfd.
    await afterWindowStopped(planId);
    const plan = await (await ctx.get(`/api/v1/hosts/${hostId}/plans/${planId}`)).json();
    const heap = hex(plan.install_detail.heap);
    const mapped = readFileSync(`/proc/${pid}/maps`, "utf8")
      .split("\n")
      .filter((l) => hex(l.split("-")[0] || "0") === heap);
    expect(mapped.length, readFileSync(`/proc/${pid}/maps`, "utf8")).toBe(1);
    expect(mapped[0]).toContain("r-xp");
    expect(mapped[0]).toContain(planId);
    const head = readMem(pid, entry, 5);
    expect(head[0], "the entry jumps to the copy").toBe(0xe9);
    expect(entry + 5n + BigInt(head.readInt32LE(1))).toBe(hex(plan.install_detail.new_entry));

    await screenshotPlan(page, "plan-view.png");

    // Every result the threads computed through the copy was right (a wrong one exits with status 3).
    expect(fx.proc.exitCode, fx.out()).toBeNull();
    expect(fx.out()).not.toContain("MISMATCH");

    // The installed group in the console: the root's and a member's function pages carry the badge,
    // which leads back to the plan.
    const member = plan.members.find((m: string) => m !== "pr_root");
    expect(member, JSON.stringify(plan.members)).toBeTruthy();
    const memberPage = await (await ctx.get(`/api/v1/hosts/${hostId}/functions?q=${member}&target=${target}`)).json();
    const memberFn = memberPage.items.find((f: { name: string }) => f.name === member);
    for (const fid of [root.id, memberFn.id]) {
      await page.goto(`/hosts/${hostId}/functions/${fid}?target=${target}`);
      await expect(page.getByRole("link", { name: "installed copy" })).toHaveAttribute("href", planUrl);
    }
    await page.getByRole("link", { name: "installed copy" }).click();
    await expect(page).toHaveURL(new RegExp(`${planId}$`));
    await expect(planState(page)).toHaveText("installed");

    // One click reverts: the original bytes are back and the copy is unmapped or kept unused.
    await page.getByRole("button", { name: "Revert" }).click();
    await expect(planState(page)).toHaveText("reverted", { timeout: HANG_MS });
    expect(readMem(pid, entry, 16).equals(original), "the original bytes are back").toBe(true);
    const after = await (await ctx.get(`/api/v1/hosts/${hostId}/plans/${planId}`)).json();
    if (after.revert_detail.status === "reverted") {
      expect(readFileSync(`/proc/${pid}/maps`, "utf8")).not.toContain(planId);
    }
    await new Promise((r) => setTimeout(r, 500));
    expect(fx.proc.exitCode, fx.out()).toBeNull();
    // Reverted: no badge any more.
    await page.goto(`/hosts/${hostId}/functions/${root.id}?target=${target}`);
    await expect(page.getByRole("heading", { name: "pr_root" })).toBeVisible();
    await expect(page.getByRole("button", { name: "Optimize…" })).toBeVisible();
    await expect(page.getByRole("link", { name: "installed copy" })).toHaveCount(0);
    await page.goto(planUrl);

    await expectFullAudit(page);
  } finally {
    fx.proc.kill("SIGTERM");
  }
});

/** The interleaved before/after's sentence once a comparison has ended (a verdict, never a progress). */
const VERDICT = /^(Within noise|Faster|Slower|Too few usable pairs)/;

/** Wait for the comparison's verdict, bounded by its progress as stateAfter is: the sentence names the
 * step and the pair it is at, and the wait fails only when it stays the same for HANG_MS. */
async function untilVerdict(verdict: Locator) {
  let seen = "";
  let since = Date.now();
  for (;;) {
    const now = (await verdict.textContent()) ?? "";
    if (VERDICT.test(now)) break;
    if (now !== seen) [seen, since] = [now, Date.now()];
    if (Date.now() - since > HANG_MS) throw new Error(`the comparison made no progress for ${HANG_MS} ms: ${now}`);
    await new Promise((r) => setTimeout(r, 500));
  }
  await expect(verdict).toHaveText(VERDICT);
}
const INTERVAL = /\(95% interval [+−]\d+\.\d% \.\. [+−]\d+\.\d%\)/;

test("a process's plan installed with the guard: the interleaved before/after with its interval, compare again, revert", async ({
  page,
  browser,
}) => {
  test.setTimeout(FLOW_MS);
  const fx = await startFixture();
  const pid = fx.proc.pid!;
  try {
    const target = await attach(pid);
    const root = await prRoot(target);
    const { planUrl, planId } = await optimizeFromConsole(page, target, root);
    await requestAndApprove(page, browser, planUrl, planId);

    // Install with the guard (checked by default): right after the install the agent alternates the
    // original and the installed code, six pairs of one-second windows, sampling the process.
    await expect(page.getByRole("checkbox", { name: "Guard: revert if slower" })).toBeChecked();
    await page.getByRole("button", { name: "Install" }).click();
    const verdict = page.getByTestId("interleaved-verdict");
    await untilVerdict(verdict);
    await expect(page.getByTestId("interleaved-pairs").locator("tbody tr")).toHaveCount(6);
    await expect(page.getByRole("img", { name: /Share of samples in the plan's code per pair/ })).toBeVisible();
    const api = async () => (await ctx.get(`/api/v1/hosts/${hostId}/plans/${planId}`)).json();
    const first = (await api()).interleaved;
    const figures = (c: { summary: { verdict: string; change: number | null; interval: number[] | null } }) =>
      `${c.summary.verdict} ${c.summary.change} [${c.summary.interval}]`;
    test.info().annotations.push({ type: "guard's comparison", description: figures(first) });
    expect(first.guard).toBe(true);
    expect(first.state, first.error).toBe("done");
    expect(first.windows).toHaveLength(12);
    expect(first.windows.every((w: { samples: number }) => w.samples > 0)).toBe(true);
    if (first.summary.verdict !== "insufficient") await expect(verdict).toContainText(INTERVAL);
    const guard = page.getByTestId("guard-reason");
    if (first.summary.verdict === "slower") {
      // The guard reverted the plan by itself and says why, with the figures, here and in the audit trail.
      await expect(planState(page)).toHaveText("reverted", { timeout: HANG_MS });
      await expect(guard).toHaveText(
        /^guard: the plan's code took \+\d+\.\d% of the samples \(95% interval .+\); reverted$/,
      );
      await expect(page.getByTestId("revert-by")).toContainText("Revert by system");
      const audit = page.getByTestId("plan-audit");
      await expect(audit.getByRole("row").filter({ hasText: "guard reverted" })).toContainText("system");
      expect(fx.proc.exitCode, fx.out()).toBeNull();
      return;
    }
    await expect(guard).toHaveText(/; kept installed$/);
    await expect(planState(page)).toHaveText("installed", { timeout: HANG_MS });

    // Compare again: it runs (its progress), ends with a verdict, and leaves the plan installed.
    await page.getByRole("button", { name: "Compare again" }).click();
    await expect(page.getByRole("progressbar", { name: "Comparison progress" })).toBeVisible();
    await expect(page.getByRole("button", { name: "Compare again" })).toBeDisabled();
    await untilVerdict(verdict);
    const again = (await api()).interleaved;
    test.info().annotations.push({ type: "compared again", description: figures(again) });
    expect(again.id).not.toBe(first.id);
    expect(again.guard).toBe(false);
    expect(again.state, again.error).toBe("done");
    await expect(planState(page)).toHaveText("installed");

    // Revert; every result the threads computed, through the copy and the original, was right.
    await page.getByRole("button", { name: "Revert" }).click();
    await expect(planState(page)).toHaveText("reverted", { timeout: HANG_MS });
    const audit = page.getByTestId("plan-audit");
    await expect(audit.getByRole("cell", { name: "compare requested", exact: true })).toHaveCount(2);
    await expect(audit.getByRole("cell", { name: "guard kept", exact: true })).toHaveCount(1);
    await expect(audit.getByRole("cell", { name: "compared", exact: true })).toHaveCount(2);
    expect(fx.proc.exitCode, fx.out()).toBeNull();
    expect(fx.out()).not.toContain("MISMATCH");
  } finally {
    fx.proc.kill("SIGTERM");
  }
});

/** The benchmark's real program: SQLite's query workload driver (bench/replace_sqlite/build), asked for
 * rounds of two workload passes one after another for as long as it runs. Each round prints a checksum
 * of its query results, the same in every round while the code is right. */
function startSqlite() {
  // SQLite's amalgamation from the libsqlite3-sys crate, built with -O2 once and cached in bench/out.
  const driver = execFileSync(join(__dirname, "..", "..", "bench", "replace_sqlite", "build"), {
    encoding: "utf8",
    // A build, not a check: gcc -O2 of the 9 MB amalgamation took over 300 s at load average ~20 (s16b).
    timeout: FLOW_MS,
    stdio: ["ignore", "pipe", "inherit"],
  }).trim();
  const proc = spawn(driver, [], { stdio: ["pipe", "pipe", "pipe"] });
  const sums = new Map<string, number>();
  let buf = "",
    err = "",
    ready = false,
    stopping = false;
  proc.stdout!.on("data", (d) => {
    buf += d;
    for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.startsWith("ns ")) {
        const sum = line.split(" ")[5];
        sums.set(sum, (sums.get(sum) ?? 0) + 1);
      }
      if (line === "ready") ready = true;
      if (!stopping && (line === "ready" || line.startsWith("ns "))) proc.stdin!.write("run 2\n");
    }
  });
  proc.stderr!.on("data", (d) => (err += d));
  const rounds = () => [...sums.values()].reduce((a, b) => a + b, 0);
  return {
    proc,
    sums,
    rounds,
    err: () => err,
    async started() {
      const end = Date.now() + 30_000;
      while (!ready || rounds() < 1) {
        if (proc.exitCode !== null || Date.now() > end) throw new Error(`the SQLite driver did not start: ${err}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    stop() {
      stopping = true;
      proc.kill("SIGTERM");
    },
  };
}

test("the benchmark program, SQLite: optimize sqlite3BtreeInsert from the console, approve, install, before/after, revert", async ({
  page,
  browser,
}) => {
  test.setTimeout(FLOW_MS);
  const sq = startSqlite();
  const pid = sq.proc.pid!;
  try {
    await sq.started();
    const target = await attachFromConsole(page, pid);
    const root = await functionNamed(target, "sqlite3BtreeInsert");
    const entry = hex(root.address_hex);
    const original = readMem(pid, entry, 16);

    const { planUrl, planId } = await optimizeFromConsole(page, target, root);
    const made = await (await ctx.get(`/api/v1/hosts/${hostId}/plans/${planId}`)).json();
    expect(made.members.length, JSON.stringify(made.members)).toBeGreaterThan(1);

    await requestAndApprove(page, browser, planUrl, planId);
    const roundsBefore = sq.rounds();
    const table = await installFromConsole(page);
    // Time per invocation both ways, each with its change and its spread over the windows' intervals;
    // the hardware counters unavailable with the agent's reason (no PMU on this host), never a number.
    for (const label of ["Wall time per call", "Virtual time per call"]) {
      const row = table.getByRole("row").filter({ hasText: label });
      await expect(row.locator("td").nth(0)).toHaveText(/^\d+ ns$/);
      await expect(row.locator("td").nth(1)).toHaveText(/^\d+ ns$/);
      await expect(row.locator("td").nth(2)).toHaveText(/^-?\d+\.\d%$/);
      await expect(row.locator("td").nth(3)).toHaveText(/^\d+–\d+ ns \(\d+ s\) → \d+–\d+ ns \(\d+ s\)$/);
    }
    const host = await (await ctx.get(`/api/v1/hosts/${hostId}`)).json();
    const pmu = (host.capabilities ?? []).some(
      (c: { name: string; available: boolean }) => c.name === "hardware_pmu" && c.available,
    );
    if (pmu) {
      await expect(table.getByRole("row").filter({ hasText: "Cycles per call" }).locator("td").nth(0)).toHaveText(
        /^\d+ cycles$/,
      );
    } else {
      await expect(table.getByRole("row").filter({ hasText: "Hardware counters" }).locator("td")).toHaveText(
        /^unavailable \(.*PMU.*\)$/,
      );
    }
    await afterWindowStopped(planId);
    const plan = await (await ctx.get(`/api/v1/hosts/${hostId}/plans/${planId}`)).json();
    const head = readMem(pid, entry, 5);
    expect(head[0], "the entry jumps to the copy").toBe(0xe9);
    expect(entry + 5n + BigInt(head.readInt32LE(1))).toBe(hex(plan.install_detail.new_entry));
    await screenshotPlan(page, "plan-before-after-sqlite.png");

    // The workload kept running through the copy, with the same results in every round.
    expect(sq.rounds(), "workload rounds ran while the copy was installed").toBeGreaterThan(roundsBefore + 10);
    expect([...sq.sums.keys()], "every round's checksum is the same").toHaveLength(1);

    await page.getByRole("button", { name: "Revert" }).click();
    await expect(planState(page)).toHaveText("reverted", { timeout: HANG_MS });
    expect(readMem(pid, entry, 16).equals(original), "the original bytes are back").toBe(true);
    const roundsReverted = sq.rounds();
    await expect.poll(() => sq.rounds(), { timeout: HANG_MS }).toBeGreaterThan(roundsReverted + 5);
    expect(sq.proc.exitCode, sq.err()).toBeNull();
    expect([...sq.sums.keys()], "every round's checksum is the same").toHaveLength(1);
    await expectFullAudit(page);
  } finally {
    sq.stop();
  }
});

test("the benchmark program, SQLite: optimize its whole hot set from the console, approve, install, before/after, revert", async ({
  page,
  browser,
}) => {
  test.setTimeout(FLOW_MS);
  const sq = startSqlite();
  const pid = sq.proc.pid!;
  try {
    await sq.started();
    const target = await attachFromConsole(page, pid);
    await functionNamed(target, "sqlite3BtreeInsert"); // the driver's catalog is stored
    // The process's page: "Optimize hot set" with the seconds of PC samples.
    const seconds = 5;
    await page.setViewportSize({ width: 1400, height: 1000 });
    await page.goto(`/hosts/${hostId}/measure?target=${target}`);
    await page.getByRole("spinbutton", { name: "Seconds of PC samples" }).fill(String(seconds));
    const planUrl = await clickOptimize(page, "Optimize hot set");
    const planId = planUrl.split("/").pop()!;
    await expect(page.getByRole("heading", { level: 1, name: `Hot set of ${target}` })).toBeVisible();
    // The agent samples for the seconds asked, then plans every hot function; waiting is bounded by
    // what the agent reports doing, not by a guess: while it plans, the make command is running.
    await expect
      .poll(
        async () => {
          const p = await (await ctx.get(`/api/v1/hosts/${hostId}/plans/${planId}`)).json();
          if (p.state !== "planning") return p.state;
          const c = await (await ctx.get(`/api/v1/hosts/${hostId}/commands/${p.make_command}`)).json();
          return ["done", "failed", "cancelled"].includes(c.state) ? `command ${c.state}` : "planning";
        },
        { timeout: 300_000, intervals: [1000] },
      )
      .toBe("ready");
    await expect(planState(page)).toHaveText("ready", { timeout: HANG_MS });
    const made = await recordAndBody(planId);
    expect(made.hot_set).toBe(true);
    expect(made.plan.options.hot_set).toBe(true);
    expect(made.members.length, JSON.stringify(made.members)).toBeGreaterThan(2);
    expect(made.root_name).toBe(made.members[0]);
    await expect(page.getByTestId("plan-kind")).toHaveText(
      new RegExp(
        `^whole hot set: ${made.members.length} functions, first laid out ${made.root_name}; \\d+ kept in place$`,
      ),
    );
    // Its members counted inline for as long as they were sampled (those that call others too: counted copies
    // carry their own unwind data); one that cannot be counted so keeps its samples, scaled, and then the
    // plan's counts are an estimate, said so.
    expect(made.plan.profile.source).toContain("(inline counters)");
    expect(made.estimated).toBe(made.plan.profile.estimated);
    await expect(page.getByText(countsLabel(made), { exact: true })).toBeVisible();
    await expect(page.getByTestId("heatmap-after")).toBeVisible();
    await expect(page.getByRole("heading", { name: `Group (${made.members.length} functions)` })).toBeVisible();
    const entries = made.plan.group.map((g: { address: string }) => hex(g.address));
    const originals = entries.map((a: bigint) => readMem(pid, a, 5));

    await requestAndApprove(page, browser, planUrl, planId);
    const roundsBefore = sq.rounds();
    await installFromConsole(page);
    const plan = await (await ctx.get(`/api/v1/hosts/${hostId}/plans/${planId}`)).json();
    expect(plan.install_detail.entries, "every member's entry is spliced").toBe(made.members.length);
    for (const a of entries) expect(readMem(pid, a, 1)[0], `the entry at ${a.toString(16)} jumps`).toBe(0xe9);
    // The window after ends before the revert (its probes are in the copy's code).
    await afterWindowStopped(planId);
    // The workload kept running through the copies, with the same results in every round.
    await expect.poll(() => sq.rounds(), { timeout: HANG_MS }).toBeGreaterThan(roundsBefore + 10);
    expect([...sq.sums.keys()], "every round's checksum is the same").toHaveLength(1);

    await page.getByRole("button", { name: "Revert" }).click();
    await expect(planState(page)).toHaveText("reverted", { timeout: HANG_MS });
    entries.forEach((a: bigint, i: number) =>
      expect(readMem(pid, a, 5).equals(originals[i]), "the original bytes are back").toBe(true),
    );
    const roundsReverted = sq.rounds();
    await expect.poll(() => sq.rounds(), { timeout: HANG_MS }).toBeGreaterThan(roundsReverted + 5);
    expect(sq.proc.exitCode, sq.err()).toBeNull();
    expect([...sq.sums.keys()], "every round's checksum is the same").toHaveLength(1);
    await expectFullAudit(page);
  } finally {
    sq.stop();
  }
});

test("a plan whose process exited is stale and cannot be installed", async ({ page }) => {
  test.setTimeout(180_000);
  const fx = await startFixture(1);
  const pid = fx.proc.pid!;
  let killed = false;
  try {
    const target = await attach(pid);
    const root = await prRoot(target);
    const made = await ctx.post(`/api/v1/hosts/${hostId}/plans`, {
      data: { target, function_id: root.id, seconds: 2 },
    });
    expect(made.ok(), await made.text()).toBe(true);
    const planId = (await made.json()).id;
    const planPath = `/api/v1/hosts/${hostId}/plans/${planId}`;
    await expect.poll(async () => (await (await ctx.get(planPath)).json()).state, { timeout: 120_000 }).toBe("ready");
    expect((await ctx.post(`${planPath}/request`)).status()).toBe(200);
    expect((await approverApi.post(`${planPath}/approve`)).status()).toBe(200);

    fx.proc.kill("SIGKILL");
    killed = true;
    await page.goto(`/hosts/${hostId}/plans/${planId}`);
    await expect(planState(page)).toHaveText("stale", { timeout: HANG_MS });
    await expect(page.getByRole("note").filter({ hasText: /^Stale: / })).toContainText(target);
    await expect(page.getByRole("button", { name: "Install" })).toBeDisabled();
    const install = await ctx.post(`${planPath}/install`, { data: { window_s: 1 } });
    expect(install.status()).toBe(409);
    expect((await install.json()).detail).toContain("stale");
  } finally {
    if (!killed) fx.proc.kill("SIGKILL");
  }
});

test("a kernel function's plan is an estimate, and installing it is refused with the agent's reason", async ({
  page,
}) => {
  test.setTimeout(240_000);
  const found = await (await ctx.get(`/api/v1/hosts/${hostId}/functions?q=vfs_read&limit=50`)).json();
  const fn = found.items.find((f: { name: string }) => f.name === "vfs_read");
  expect(fn, "vfs_read is in the catalog").toBeTruthy();
  const loop = startReadLoop();
  try {
    await page.goto(`/hosts/${hostId}/functions/${fn.id}`);
    await expect(page.getByRole("heading", { name: "vfs_read" })).toBeVisible();
    const planId = (await clickOptimize(page)).split("/").pop()!;
    await expect(planState(page)).toHaveText("ready", { timeout: 120_000 });
    await expect(page.getByText("estimated (sampled)")).toBeVisible();
    await expect(page.getByRole("note").filter({ hasText: "Block counts were sampled" })).toBeVisible();
    await expect(page.getByTestId("chain-table").locator("thead")).toContainText("Weight (estimate)");

    const planPath = `/api/v1/hosts/${hostId}/plans/${planId}`;
    expect((await ctx.post(`${planPath}/request`)).status()).toBe(200);
    expect((await approverApi.post(`${planPath}/approve`)).status()).toBe(200);
    await page.reload();
    await page.getByRole("button", { name: "Install" }).click();
    await expect(planState(page)).toHaveText("install_failed", { timeout: 120_000 });
    await expect(page.getByRole("alert").filter({ hasText: "kernel code replacement" })).toBeVisible();
    const plan = await (await ctx.get(planPath)).json();
    expect(plan.error).toMatch(/kernel code replacement (is unavailable|was not probed)/);
  } finally {
    loop.kill();
  }
});
