// SPDX-License-Identifier: Apache-2.0
// The fleet (issue 19, first slice) in Chromium against the whole stack: this machine's real agent and
// four scripted agents, named scripted-… — stand-ins for other machines, which cannot exist here. Each
// is backend/tests/scripted_agent_cli.py (the backend tests' fake agent, tests.scripted_agent, run as a
// program): it enrols with a one-time token the admin creates over REST, connects over mutual TLS,
// reports its labels in Hello, uploads its catalog and replays a minute of one-second sample batches with
// fixed counts per function, as call stacks (each function called from __x64_sys_read). Three share one
// kernel build (group A), one has another (group B), five a third (group C, role=batch), and scripted-a3
// is stopped once its minute is stored, so group A has an offline host.
//   The fleet page is then the first screen; the groups show their host, online and offline counts; this
// host is in a group of its own; a label filter narrows the groups and their hosts; group A's hot code
// shows its hottest functions with the numbers the batches imply and the share of hosts where each is
// hot; a host's cell opens that host's function view over the same range; group A's flame graph merges
// its hosts' stacks and its compare view sets one rack against the others; an admin's label edit shows on
// the host and in the fleet. In group C ksys_read takes 1 in 11 of four hosts' samples and half of c5's:
// c5 is listed as an outlier host with the reason, and opens its function view. A plan made on a1's
// scripted process, approved by a second user and installed shows on the fleet's installed plans page.
//   Other specs go to `/` expecting this host's list (one host): at the end the scripted agents are
// stopped and their hosts deleted through the admin API (also when a test fails), so the fleet is this
// host alone again, whatever the order the specs run in.
import { test, expect, type APIRequestContext, type Locator, type Page } from "@playwright/test";
import { execSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { api, apiAs, hostname, readyHost, waitForCatalog } from "./helpers";
import { saidSo, startScripted, stopScripted, type Scripted } from "./scripted";

// Where the pictures of the fleet page, group A's flame graph and the installed plans go: docs/img when
// HOTPATH_E2E_SCREENSHOTS names it, else the results.
const shots = process.env.HOTPATH_E2E_SCREENSHOTS ?? join(__dirname, "..", "test-results");

/** A picture of the page from its top down to `last`'s bottom (below it the viewport is empty). */
async function screenshotTo(page: Page, file: string, last: Locator) {
  const box = (await last.boundingBox())!;
  mkdirSync(shots, { recursive: true });
  const clip = { x: 0, y: 0, width: page.viewportSize()!.width, height: Math.ceil(box.y + box.height + 16) };
  await page.screenshot({ path: join(shots, file), clip });
}

// A bound for what is bound to happen (a program started, a state the backend reaches), not a speed
// check: a passing test goes on as soon as it holds. On this 2-core machine at a load average of 20 (a
// benchmark storing a fleet beside it), a scripted agent took 63 s from its enrolment to its Welcome.
const HANG_MS = 240_000;

// The scripted fleet. Samples are per one-second batch, in block 0 of the scripted vmlinux's function
// (tests.scripted_agent.kernel_functions); every host sends SECONDS batches from the same minute.
const SECONDS = 60;
const FLEET = [
  { key: "a1", group: "A", labels: { role: "db", rack: "r1" }, samples: { vfs_read: 9, ksys_read: 1 } },
  { key: "a2", group: "A", labels: { role: "db", rack: "r2" }, samples: { vfs_read: 5, rw_verify_area: 5 } },
  { key: "a3", group: "A", labels: { role: "web", rack: "r1" }, samples: { ksys_read: 7, do_sys_open: 3 } },
  { key: "b1", group: "B", labels: { role: "db", rack: "r3" }, samples: { ksys_read: 10 } },
  { key: "c1", group: "C", labels: { role: "batch" }, samples: { vfs_read: 10, ksys_read: 1 } },
  { key: "c2", group: "C", labels: { role: "batch" }, samples: { vfs_read: 10, ksys_read: 1 } },
  { key: "c3", group: "C", labels: { role: "batch" }, samples: { vfs_read: 10, ksys_read: 1 } },
  { key: "c4", group: "C", labels: { role: "batch" }, samples: { vfs_read: 10, ksys_read: 1 } },
  { key: "c5", group: "C", labels: { role: "batch" }, samples: { vfs_read: 5, ksys_read: 5 } },
] as const;
type Key = (typeof FLEET)[number]["key"];

const run = Date.now().toString(36);
const agents = new Map<Key, Scripted>();
let ctx: APIRequestContext;
const name = (key: Key) => `scripted-${key}-${run}`;
const agent = (key: Key) => agents.get(key)!;

/** Start the scripted agent of one fleet member; resolves once it has connected. */
async function startMember(spec: (typeof FLEET)[number], start: number): Promise<Scripted> {
  const id = name(spec.key);
  const a = await startScripted(
    ctx,
    {
      id,
      kernelTag: `e2e-fleet-${spec.group}-${run}`,
      labels: spec.labels,
      samples: spec.samples,
      start,
      seconds: SECONDS,
      stacks: true,
      note: `scripted agent ${id} of e2e/tests/fleet.spec.ts`,
    },
    HANG_MS,
  );
  agents.set(spec.key, a);
  return a;
}

async function groupOf(key: Key): Promise<{ id: string; kernel_release: string; kernel_build_id: string }> {
  const groups = (await (await ctx.get("/api/v1/fleet/groups?limit=500")).json()).items;
  return groups.find((g: { kernel_build_id: string }) => g.kernel_build_id === agent(key).buildId);
}

/** The section of the fleet page of the group whose kernel build id starts so (its heading shows 12). */
const groupSection = (page: Page, buildId: string) =>
  page.getByRole("region").filter({ has: page.getByRole("heading", { name: buildId.slice(0, 12) }) });

// Each test loads several pages one after the other: its bound is the hang bound, not the default 90 s
// (at a load average of 12 the label edit's eight steps took longer than that).
test.describe.configure({ mode: "serial", timeout: HANG_MS });

test.beforeAll(async () => {
  test.setTimeout(4 * HANG_MS);
  ({ ctx } = await readyHost());
  // A whole minute that ended two to three minutes ago: below the rollups' minute watermark, so the batches are
  // summed into the rollups as they are stored, and inside the hot code page's default last hour.
  const start = Math.floor(Date.now() / 60_000) * 60 - 180;
  await Promise.all(FLEET.map((spec) => startMember(spec, start)));
  // Samples of a catalog piece the backend has not stored are dropped: send once every host's is.
  for (const a of agents.values()) await waitForCatalog(ctx, a.id, HANG_MS);
  for (const a of agents.values()) a.proc.stdin!.write("send\n");
  for (const a of agents.values()) await saidSo(a, "sent", HANG_MS);
  await stopScripted(agent("a3"));
  await expect
    .poll(async () => (await (await ctx.get(`/api/v1/hosts/${agent("a3").id}`)).json()).online, { timeout: HANG_MS })
    .toBe(false);
  // Hot code reads only the rollups, and says up to where they cover the range (`covered_to`, the minute
  // watermark). Wait for that state, bounded as a hang: the rollup task moves the watermark past a minute
  // once it has ended (plus its lag), however long its passes take on a loaded machine. Every batch of the
  // minute is acknowledged, so stored: once the rollups cover the minute they must hold all of it, 840
  // samples of vfs_read in group A (a1 540, a2 300), whichever of the writer or the rollup task summed it.
  const a = await groupOf("a1");
  const minuteEnd = (start + SECONDS) * 1000;
  let hot: { covered_to: string | null; items: { name: string; samples: number }[] } | undefined;
  await expect
    .poll(
      async () => {
        hot = await (await ctx.get(`/api/v1/fleet/groups/${a.id}/hot-code?window_s=3600`)).json();
        return hot?.covered_to ? new Date(hot.covered_to).getTime() >= minuteEnd : false;
      },
      { timeout: HANG_MS, message: "the rollups cover the scripted minute" },
    )
    .toBe(true);
  expect(hot!.items.find((i) => i.name === "vfs_read")?.samples, JSON.stringify(hot)).toBe(840);
});

test.afterAll(async () => {
  const admin = ctx ?? (await api());
  await Promise.all([...agents.values()].map(stopScripted));
  for (const a of agents.values()) {
    const r = await admin.delete(`/api/v1/hosts/${encodeURIComponent(a.id)}`);
    expect([204, 404], `delete ${a.id}`).toContain(r.status());
  }
  const left = (await (await admin.get("/api/v1/fleet/groups?limit=500")).json()).items;
  const ids = left.flatMap((g: { hosts: { id: string }[] }) => g.hosts.map((h) => h.id));
  expect(ids.filter((id: string) => id.startsWith("scripted-"))).toEqual([]);
});

test("the fleet page is the first screen: hosts grouped by kernel build with their counts", async ({ page }) => {
  const groups = await (await ctx.get("/api/v1/fleet/groups?limit=500")).json();
  const hosts = groups.items.reduce((n: number, g: { host_count: number }) => n + g.host_count, 0);
  expect(hosts).toBeGreaterThanOrEqual(5);

  await page.goto("/");
  await expect(page.getByRole("heading", { name: "Fleet" })).toBeVisible();
  await expect(page.getByText(`${hosts} hosts in ${groups.total} kernel builds`)).toBeVisible();

  // Group A: three scripted hosts of one kernel build, scripted-a3 stopped.
  const a = groupSection(page, agent("a1").buildId);
  await expect(a.getByRole("heading")).toContainText(agent("a1").release);
  await expect(a.locator(".group-counts")).toHaveText(
    /^3 hosts\s*·\s*2 online\s*·\s*1 offline\s*·\s*Hot code\s*·\s*Installed plans$/,
  );
  await expect(a.getByRole("row")).toHaveCount(4); // the header and three hosts
  await expect(a.getByRole("row").filter({ hasText: name("a1") })).toContainText(/online\s*rack=r1\s*role=db/);
  await expect(a.getByRole("row").filter({ hasText: name("a2") })).toContainText(/online\s*rack=r2\s*role=db/);
  await expect(a.getByRole("row").filter({ hasText: name("a3") })).toContainText(/offline\s*rack=r1\s*role=web/);

  const b = groupSection(page, agent("b1").buildId);
  await expect(b.locator(".group-counts")).toHaveText(
    /^1 host\s*·\s*1 online\s*·\s*0 offline\s*·\s*Hot code\s*·\s*Installed plans$/,
  );
  await expect(b.getByRole("row").filter({ hasText: name("b1") })).toContainText(/online\s*rack=r3\s*role=db/);

  // This machine's real agent, in a group of its own kernel (no scripted host runs it).
  const self = page.getByRole("region").filter({ has: page.getByRole("row").filter({ hasText: hostname }) });
  await expect(self.getByRole("heading")).toContainText(execSync("uname -r").toString().trim());
  await expect(self.getByRole("row").filter({ hasText: hostname })).toContainText("online");
  await expect(self.getByRole("row").filter({ hasText: "scripted-" })).toHaveCount(0);
  mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: join(shots, "fleet.png"), fullPage: true });
});

test("a label filter narrows the groups and their hosts", async ({ page }) => {
  await page.goto("/");
  const filter = page.getByRole("searchbox", { name: "Label filter" });
  await filter.fill("role=db");
  await page.getByRole("button", { name: "Filter" }).click();
  await expect(page).toHaveURL(/[?&]label=role%3Ddb/);
  await expect(page.getByText("3 hosts in 2 kernel builds with role=db")).toBeVisible();
  const a = groupSection(page, agent("a1").buildId);
  await expect(a.locator(".group-counts")).toHaveText(/^2 hosts\s*·\s*2 online\s*·\s*0 offline/);
  await expect(a.getByRole("row").filter({ hasText: "scripted-" })).toHaveText([
    new RegExp(name("a1")),
    new RegExp(name("a2")),
  ]);
  await expect(
    groupSection(page, agent("b1").buildId)
      .getByRole("row")
      .filter({ hasText: name("b1") }),
  ).toBeVisible();
  await expect(page.getByRole("row").filter({ hasText: hostname })).toHaveCount(0);

  await filter.fill("role=db rack=r1");
  await page.getByRole("button", { name: "Filter" }).click();
  await expect(page.getByText("1 host in 1 kernel build with role=db, rack=r1")).toBeVisible();
  await expect(page.getByRole("row").filter({ hasText: "scripted-" })).toHaveText([new RegExp(name("a1"))]);
});

test("a group's hot code: its hottest functions and the share of hosts where each is hot", async ({ page }) => {
  await page.goto("/");
  await groupSection(page, agent("a1").buildId).getByRole("link", { name: "Hot code" }).click();
  await expect(page.getByRole("heading", { name: "Fleet hot code" })).toBeVisible();
  const table = page.getByRole("table", { name: "Hot code across hosts" });

  // Per host over the minute (60 batches): a1 vfs_read 540, ksys_read 60 (busy 600); a2 vfs_read 300,
  // rw_verify_area 300; a3 ksys_read 420, do_sys_open 180. Group A sums them; at the page's default
  // threshold (1% of a host's busy samples) a function is hot on every host that sampled it.
  const a1 = name("a1"),
    a2 = name("a2"),
    a3 = name("a3");
  await expect(table.getByRole("columnheader")).toHaveText([
    "Function",
    "Samples ▼",
    "Hot on",
    a1,
    a2,
    `${a3} offline`,
  ]);
  const rows = table.getByRole("row").filter({ has: page.getByRole("rowheader") });
  const expectRows = async (want: [string, string, string][]) => {
    await expect(rows.getByRole("rowheader")).toHaveText(want.map(([f]) => new RegExp(`^${f}\\b`)));
    for (const [f, samples, share] of want) {
      const row = rows.filter({ has: page.getByRole("rowheader", { name: new RegExp(`^${f}\\b`) }) });
      await expect(row.getByRole("cell").nth(0)).toHaveText(samples);
      await expect(row.getByRole("cell").nth(1)).toHaveText(share);
    }
  };
  await expectRows([
    ["vfs_read", "840", "2 of 3 hosts (67%)"],
    ["ksys_read", "480", "2 of 3 hosts (67%)"],
    ["rw_verify_area", "300", "1 of 3 hosts (33%)"],
    ["do_sys_open", "180", "1 of 3 hosts (33%)"],
  ]);
  for (const [label, share] of [
    [`vfs_read on ${a1}`, "90.0%"],
    [`vfs_read on ${a2}`, "50.0%"],
    [`ksys_read on ${a1}`, "10.0%"],
    [`ksys_read on ${a3}`, "70.0%"],
    [`rw_verify_area on ${a2}`, "50.0%"],
    [`do_sys_open on ${a3}`, "30.0%"],
  ])
    await expect(table.getByRole("link", { name: `${label}: ${share}` })).toHaveText(share);
  await expect(table.getByRole("link", { name: new RegExp(`^vfs_read on ${a3}`) })).toHaveCount(0);
  // Three hosts with samples: too few for the outlier rule's median, and the panel says so.
  await expect(page.getByRole("region", { name: "Outlier hosts" })).toContainText(
    "Too few hosts with samples in this range to tell outliers (3; the rule needs 5).",
  );

  // Hot from 20% of a host's samples: ksys_read's 10% on a1 no longer counts.
  await page.getByLabel("Hot from").selectOption("0.2");
  await expect(page).toHaveURL(/[?&]min=0\.2/);
  await expectRows([
    ["vfs_read", "840", "2 of 3 hosts (67%)"],
    ["ksys_read", "480", "1 of 3 hosts (33%)"],
    ["rw_verify_area", "300", "1 of 3 hosts (33%)"],
    ["do_sys_open", "180", "1 of 3 hosts (33%)"],
  ]);
  // Sorted by name, by the server. (The range is the last hour, so every answer has a range of its own:
  // this one's is the range the cells link to.)
  const answer = page.waitForResponse((r) => r.url().includes("/hot-code?") && r.url().includes("sort=name"));
  await table.getByRole("button", { name: "Function" }).click();
  const hot = await (await answer).json();
  await expect(rows.getByRole("rowheader")).toHaveText([/^do_sys_open/, /^ksys_read/, /^rw_verify_area/, /^vfs_read/]);

  // A host's cell: that host's function view over the range the table covers, with its 540 samples.
  await table.getByRole("link", { name: `vfs_read on ${a1}: 90.0%` }).click();
  await expect(page.getByRole("heading", { name: "vfs_read", exact: true })).toBeVisible();
  const url = new URL(page.url());
  expect(url.pathname).toMatch(new RegExp(`^/hosts/${a1}/functions/\\d+$`));
  expect(new Date(url.searchParams.get("from")!).getTime()).toBe(new Date(hot.from).getTime());
  expect(new Date(url.searchParams.get("to")!).getTime()).toBe(new Date(hot.to).getTime());
  const samples = page.locator("dl.facts > div").filter({ has: page.getByText(/^Samples \(/) });
  await expect(samples.locator("dd")).toHaveText(/^540\b/);
});

test("a group's flame graph merges its hosts' stacks, and compare sets one rack against the others", async ({
  page,
}) => {
  // Over the minute, as stacks: every function called from __x64_sys_read (a1 600 samples, a2 600, a3 600).
  const a = await groupOf("a1");
  const fg = await (await ctx.get(`/api/v1/fleet/groups/${a.id}/flamegraph?window_s=3600`)).json();
  expect(fg.samples, JSON.stringify(fg.hosts)).toBe(1800);
  const names: string[] = fg.frames.map((f: { name: string }) => f.name);
  const totals = new Map<string, number>();
  fg.nodes.frame.forEach((f: number, i: number) => {
    if (f >= 0) totals.set(names[f], (totals.get(names[f]) ?? 0) + fg.nodes.total[i]);
  });
  expect(Object.fromEntries(totals)).toEqual({
    __x64_sys_read: 1800,
    vfs_read: 840,
    ksys_read: 480,
    rw_verify_area: 300,
    do_sys_open: 180,
  });

  await page.goto("/");
  await groupSection(page, agent("a1").buildId).getByRole("link", { name: "Hot code" }).click();
  await page.getByRole("tab", { name: "Flame graph" }).click();
  await expect(page.getByRole("heading", { name: "Fleet flame graph" })).toBeVisible();
  await expect(page).toHaveURL(/[?&]view=flame/);
  await expect(page.getByTestId("fleet-flame-summary")).toContainText("1,800 samples with a stack from 3 of 3 hosts");
  // The whole group: summed from its kernel build's stack rollup, not host by host.
  await expect(page.getByTestId("fleet-flame-summary")).toContainText("read from the build's stack rollup,");
  const frame = (n: string) => page.getByTestId("flame-frame").and(page.locator(`[data-name="${n}"]`));
  await expect(page.getByRole("group", { name: "Group flame graph" })).toBeVisible();
  for (const n of ["__x64_sys_read", "vfs_read", "ksys_read", "rw_verify_area", "do_sys_open"])
    await expect(frame(n)).toHaveCount(1);
  await screenshotTo(page, "fleet-flame.png", page.getByRole("group", { name: "Group flame graph" }));

  // Compare: rack r1 (a1, a3) against the other hosts (a2).
  await page.getByRole("tab", { name: "Compare" }).click();
  await expect(page.getByRole("heading", { name: "Fleet compare" })).toBeVisible();
  await page.getByRole("textbox", { name: "Side A labels" }).fill("rack=r1");
  await page.getByRole("form", { name: "Compare" }).getByRole("button", { name: "Compare" }).click();
  await expect(page).toHaveURL(/[?&]cmp=labels&a=rack%3Dr1&bmode=others/); // the comparison is linkable
  const summary = page.getByTestId("fleet-diff-summary");
  await expect(summary).toContainText("Baseline (A): 1,200 samples from 2 of 2 hosts (rack=r1)");
  await expect(summary).toContainText("comparison (B): 600 samples from 1 of 1 host (not rack=r1)");
  // Side A keeps two of the group's three hosts: the build's rollup less a2's own; side B, a2's own.
  await expect(summary).toContainText("read from the build's stack rollup less the left-out hosts' own");
  await expect(summary).toContainText("read from each host's own stack rollups");
  await expect(page.getByRole("group", { name: "Group differential flame graph" })).toBeVisible();
  await expect(frame("rw_verify_area")).toHaveCount(1); // only on a2 (B)
  await expect(frame("do_sys_open")).toHaveCount(1); // only on a3 (A)
});

test("an admin's label edit shows on the host and in the fleet", async ({ page }) => {
  const a2 = name("a2");
  await page.goto(`/hosts/${a2}`);
  const labels = page.getByRole("group", { name: "Labels" });
  await expect(labels).toContainText("rack=r2 role=db from the agent's config");
  await labels.getByRole("button", { name: "Edit labels" }).click();
  await labels.getByLabel("Labels, one key=value a line").fill("role=cache\nrack=r2");
  await labels.getByRole("button", { name: "Save labels" }).click();
  await expect(labels).toContainText("rack=r2 role=cache set by admin (the agent reports rack=r2 role=db)");
  const host = await (await ctx.get(`/api/v1/hosts/${a2}`)).json();
  expect(host.labels).toEqual({ role: "cache", rack: "r2" });
  expect(host.labels_edited_by).toBe("admin");

  // In the fleet: role=db no longer finds it, role=cache does, in its kernel build's group.
  await page.goto("/?label=role%3Ddb");
  await expect(page.getByText("2 hosts in 2 kernel builds with role=db")).toBeVisible();
  await expect(page.getByRole("row").filter({ hasText: a2 })).toHaveCount(0);
  await page.goto("/?label=role%3Dcache");
  await expect(page.getByText("1 host in 1 kernel build with role=cache")).toBeVisible();
  const a = groupSection(page, agent("a1").buildId);
  await expect(a.getByRole("row").filter({ hasText: a2 })).toContainText(/online\s*rack=r2\s*role=cache/);
});

test("a group's outlier hosts: listed with the reason, outlined in the table, opening the host's function", async ({
  page,
}) => {
  await page.goto("/");
  await groupSection(page, agent("c1").buildId).getByRole("link", { name: "Hot code" }).click();
  const panel = page.getByRole("region", { name: "Outlier hosts" });
  // Per host over the minute: c1-c4 ksys_read 60 of 660 busy samples (9.1%), c5 300 of 600 (50%); the
  // median share 9.1%, every other host the same (MAD 0).
  await expect(panel).toContainText("at least 3x the median share");
  const c5 = name("c5");
  const rows = panel.getByRole("table", { name: "Outlier hosts" }).getByRole("row");
  await expect(rows).toHaveCount(2); // the header and ksys_read on c5
  await expect(rows.nth(1)).toContainText(/ksys_read.*50\.0%.*9\.1%/);
  await expect(rows.nth(1)).toContainText(
    "50.0% of the host's samples vs 5.5× the median 9.1%; the other hosts agree (MAD 0); 300 samples",
  );
  const table = page.getByRole("table", { name: "Hot code across hosts" });
  await expect(table.getByRole("link", { name: `ksys_read on ${c5}: 50.0% (outlier)` })).toBeVisible();
  await expect(table.getByRole("link", { name: `ksys_read on ${name("c1")}: 9.1%` })).toBeVisible();
  await expect(table.locator("td.heat-outlier")).toHaveCount(1);
  await panel.getByRole("link", { name: `ksys_read on ${c5}` }).click();
  await expect(page.getByRole("heading", { name: "ksys_read", exact: true })).toBeVisible();
  expect(new URL(page.url()).pathname).toMatch(new RegExp(`^/hosts/${c5}/functions/\\d+$`));
  const samples = page.locator("dl.facts > div").filter({ has: page.getByText(/^Samples \(/) });
  await expect(samples.locator("dd")).toHaveText(/^300\b/);
});

test("installed plans across the fleet: a1's plan, since when, by whom, linking to its page", async ({ page }) => {
  // A plan of a1's scripted process: made and requested by the admin, approved by a second user,
  // installed by the admin with one-second windows (the scripted agent measures no calls in them).
  const a1 = name("a1");
  const approver = { username: `fleet-approver-${run}`, password: "approver-password-e2e" };
  const made = await ctx.post("/api/v1/users", { data: { ...approver, role: "approver" } });
  expect(made.status(), await made.text()).toBe(201);
  expect((await ctx.post(`/api/v1/hosts/${a1}/targets`, { data: { pid: 4242 } })).status()).toBe(202);
  await expect
    .poll(
      async () => {
        const mods = await (await ctx.get(`/api/v1/hosts/${a1}/modules?target=p4242-1000`)).json();
        return Array.isArray(mods) && mods[0]?.complete === true;
      },
      { timeout: HANG_MS, message: `${a1}'s process catalog` },
    )
    .toBe(true);
  const base = `/api/v1/hosts/${a1}/plans`;
  const r = await ctx.post(base, {
    data: { target: "p4242-1000", digest: agent("a1").processDigest, function_index: 2, seconds: 1 },
  });
  expect(r.status(), await r.text()).toBe(202);
  const planId = (await r.json()).id as string;
  const state = async () => (await (await ctx.get(`${base}/${planId}`)).json()).state as string;
  await expect.poll(state, { timeout: HANG_MS, message: "the plan is ready" }).toBe("ready");
  expect((await ctx.post(`${base}/${planId}/request`)).status()).toBe(200);
  const approverApi = await apiAs(approver.username, approver.password);
  const ok = await approverApi.post(`${base}/${planId}/approve`);
  expect(ok.status(), await ok.text()).toBe(200);
  await approverApi.dispose();
  const install = await ctx.post(`${base}/${planId}/install`, { data: { window_s: 1, guard: false } });
  expect(install.status(), await install.text()).toBe(200);
  await expect.poll(state, { timeout: HANG_MS, message: "the plan is installed" }).toBe("installed");

  await page.goto("/");
  await page.locator(".page-head").getByRole("link", { name: "Installed plans" }).click();
  await expect(page.getByRole("heading", { name: "Installed plans" })).toBeVisible();
  const row = page.getByRole("table", { name: "Installed plans" }).getByRole("row").filter({ hasText: a1 });
  await expect(row).toContainText("srv_fn_2");
  await expect(row).toContainText("p4242-1000");
  await expect(row).toContainText(`admin / ${approver.username}`);
  await expect(row).toContainText("no calls measured in either window");
  await expect(row.getByRole("link", { name: a1 })).toHaveAttribute("href", `/hosts/${a1}`);
  await screenshotTo(page, "fleet-plans.png", page.getByRole("button", { name: "Next" }));
  await row.getByRole("link", { name: "srv_fn_2" }).click();
  await expect(page).toHaveURL(new RegExp(`/hosts/${a1}/plans/${planId}$`));
  await expect(page.getByTestId("plan-state")).toHaveText("installed");
});
