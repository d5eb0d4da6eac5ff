// SPDX-License-Identifier: Apache-2.0
// Staged roll-out with guarded apply (issue 19) in Chromium against the whole stack, over six scripted
// agents named scripted-ro… — stand-ins for other machines, which cannot exist here (e2e/tests/scripted.ts:
// the backend tests' fake agent run as a program). Each runs the same scripted program build (one process
// build, so one plan fits them all) and attaches it; scripted-ro4 is scripted to report the plan's code
// slower in every comparison (a regression injected on that host). A plan is made on scripted-ro0 over
// REST, requested by the admin and approved by a second user; the rest happens in the console as an
// operator does it:
//   1. On the approved plan's page, "Roll out to the fleet" to the hosts labelled ring=a (ro1, ro2, ro3;
//      not the plan's own host, whose roll-out installs the approved plan itself) in waves 1, 2: the
//      roll-out page shows the canary installed, then the wave of two, and the roll-out completes with
//      every host's guard keeping the plan; "Revert everywhere" then reverts it on every host.
//   2. A roll-out to all six in waves 1, 4: the canary (the plan's own host, first) is kept, ro4's guard
//      finds the plan slower and reverts it there, the roll-out halts with ro4's figures as the reason, ro4
//      heads "Needs attention", and the last wave (ro5) is never started. Revert everywhere ends it.
// The scripted hosts are stopped and deleted at the end (also when a test fails), so the other specs see
// this host alone again.
import { test, expect, type APIRequestContext, type Page } from "@playwright/test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { api, apiAs, readyHost, waitForCatalog } from "./helpers";
import { startScripted, stopScripted, type Scripted } from "./scripted";

const shots = process.env.HOTPATH_E2E_SCREENSHOTS ?? join(__dirname, "..", "test-results");
// A bound for a hang, not a speed check (see fleet.spec.ts: a scripted agent took 63 s to connect at a
// load average of 20); a passing test goes on as soon as each state is reached.
const HANG_MS = 240_000;
// Every wait of these tests is for a state the backend is bound to reach (a page answered, a roll-out's
// next state): bounded as a hang. At a load average of 15 starting a roll-out took longer than the
// default 20 s.
const hang = expect.configure({ timeout: HANG_MS });
const run = Date.now().toString(36);
const HOSTS = [
  { n: 0, ring: "home" },
  { n: 1, ring: "a" },
  { n: 2, ring: "a" },
  { n: 3, ring: "a" },
  { n: 4, ring: "b", compare: "slower" as const },
  { n: 5, ring: "b" },
];
const hostId = (n: number) => `scripted-ro${n}-${run}`;
const pid = (n: number) => 5000 + n;
const approver = { username: `ro-approver-${run}`, password: "approver-password-e2e" };

let ctx: APIRequestContext;
let planId = "";
const agents: Scripted[] = [];

test.describe.configure({ mode: "serial", timeout: 3 * HANG_MS });

const planOf = async (host: string, id: string) =>
  (await (await ctx.get(`/api/v1/hosts/${encodeURIComponent(host)}/plans/${id}`)).json()) as {
    state: string;
    revert_by: string | null;
  };

test.beforeAll(async () => {
  test.setTimeout(6 * HANG_MS);
  ({ ctx } = await readyHost());
  const made = await ctx.post("/api/v1/users", { data: { ...approver, role: "approver" } });
  expect(made.status(), await made.text()).toBe(201);
  const approverApi = await apiAs(approver.username, approver.password);
  for (const h of HOSTS) {
    agents.push(
      await startScripted(
        ctx,
        {
          id: hostId(h.n),
          kernelTag: `e2e-rollout-${run}`,
          labels: { ring: h.ring, e2e: run },
          compare: h.compare,
          note: `scripted agent ${hostId(h.n)} of e2e/tests/rollout.spec.ts`,
        },
        HANG_MS,
      ),
    );
  }
  for (const h of HOSTS) {
    await waitForCatalog(ctx, hostId(h.n), HANG_MS);
    const r = await ctx.post(`/api/v1/hosts/${hostId(h.n)}/targets`, { data: { pid: pid(h.n) } });
    expect(r.status(), await r.text()).toBe(202);
    await hang
      .poll(
        async () => {
          const mods = await (await ctx.get(`/api/v1/hosts/${hostId(h.n)}/modules?target=p${pid(h.n)}-1000`)).json();
          return Array.isArray(mods) && mods[0]?.complete === true;
        },
        { timeout: HANG_MS, message: `${hostId(h.n)}'s process catalog` },
      )
      .toBe(true);
  }
  // The plan: on ro0's process, by its catalog digest and a function index, made by the admin's request;
  // requested by the admin, approved by the second user (the two-person rule).
  const base = `/api/v1/hosts/${hostId(0)}/plans`;
  const r = await ctx.post(base, {
    data: { target: `p${pid(0)}-1000`, digest: agents[0]!.processDigest, function_index: 2, seconds: 1 },
  });
  expect(r.status(), await r.text()).toBe(202);
  planId = (await r.json()).id;
  await hang
    .poll(async () => (await planOf(hostId(0), planId)).state, { timeout: HANG_MS, message: "the plan is ready" })
    .toBe("ready");
  expect((await ctx.post(`${base}/${planId}/request`)).status()).toBe(200);
  const ok = await approverApi.post(`${base}/${planId}/approve`);
  expect(ok.status(), await ok.text()).toBe(200);
  await approverApi.dispose();
});

test.afterAll(async () => {
  const admin = ctx ?? (await api());
  await Promise.all(agents.map(stopScripted));
  for (const a of agents) {
    const r = await admin.delete(`/api/v1/hosts/${encodeURIComponent(a.id)}`);
    expect([204, 404], `delete ${a.id}`).toContain(r.status());
  }
});

/** From the approved plan's page, start a roll-out with these labels and wave sizes; short windows (the
 *  scripted agents answer at once). Resolves on the roll-out's page. */
async function startRollout(page: Page, labels: string, waves: string) {
  await page.goto(`/hosts/${hostId(0)}/plans/${planId}`);
  await hang(page.getByTestId("plan-state")).toHaveText("approved");
  const form = page.getByRole("form", { name: "Start a roll-out" });
  await form.getByRole("searchbox", { name: /Only hosts with labels/ }).fill(labels);
  await form.getByRole("textbox", { name: /Wave sizes/ }).fill(waves);
  await form.getByRole("spinbutton", { name: /Before\/after window/ }).fill("1");
  await form.getByRole("spinbutton", { name: /Guard pairs/ }).fill("3");
  await form.getByRole("spinbutton", { name: /Guard window/ }).fill("0.2");
  await form.getByRole("button", { name: "Start roll-out" }).click();
  await hang(page).toHaveURL(/\/rollouts\/[0-9a-f-]{36}$/);
}

const hostRow = (page: Page, table: string, n: number) =>
  page
    .getByRole("table", { name: table })
    .getByRole("row")
    .filter({ hasText: hostId(n) });

test("a roll-out to a labelled group: the canary, then the next wave, completed; then reverted everywhere", async ({
  page,
}) => {
  await startRollout(page, `ring=a e2e=${run}`, "1, 2");
  await hang(page.getByTestId("rollout-state")).toHaveText("completed");
  await hang(page.getByTestId("rollout-progress")).toHaveText("3 of 3 hosts answered: 3 installed");
  await hang(hostRow(page, "Canary · 1 host", 1)).toContainText(/installed.*within noise/);
  for (const n of [2, 3]) await hang(hostRow(page, "Wave 1 · 2 hosts", n)).toContainText(/installed.*within noise/);
  await hang(page.getByRole("table", { name: "Hosts that need attention" })).toHaveCount(0);
  // ro0 (ring=home), ro4 and ro5 (ring=b) are of the build but not of the filter: never part of it.
  const waves = page.getByRole("table", { name: /^(Canary|Wave \d+) · / });
  await hang(waves).toHaveCount(2);
  for (const n of [0, 4, 5]) await hang(waves.getByRole("row").filter({ hasText: hostId(n) })).toHaveCount(0);
  const ro = (await (await ctx.get(page.url().replace(/^.*\/rollouts\//, "/api/v1/rollouts/"))).json()) as {
    id: string;
    hosts: { host_id: string; state: string; plan_id: string }[];
  };
  const trail = (await (await ctx.get(`/api/v1/rollouts/${ro.id}/audit`)).json()) as { action: string }[];
  expect(trail.map((a) => a.action)).toContain("rollout_start");
  mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: join(shots, "rollout.png"), fullPage: true });

  await page.getByRole("button", { name: "Revert everywhere" }).click();
  await hang(page.getByTestId("rollout-state")).toHaveText("reverted everywhere");
  for (const h of ro.hosts) expect((await planOf(h.host_id, h.plan_id)).state, h.host_id).toBe("reverted");
  await hang(page.getByTestId("rollout-audit")).toContainText("revert");
});

test("a regression on one host: its guard reverts it, the roll-out halts, the last wave is untouched", async ({
  page,
}) => {
  await startRollout(page, `e2e=${run}`, "1, 4");
  await hang(page.getByTestId("rollout-state")).toHaveText("halted");
  await hang(page.getByRole("alert")).toContainText(`Halted: ${hostId(4)}: guard:`);
  const bad = hostRow(page, "Hosts that need attention", 4);
  await hang(bad).toContainText("reverted");
  await hang(bad).toContainText(/slower; reverted by the guard · \+\d+\.\d% \(95% interval \+/);
  // Hosts in flight when it halted still answer: wait until none is.
  await hang(page.getByTestId("rollout-progress")).toHaveText(/^5 of 6 hosts answered/);
  await hang(hostRow(page, "Canary · 1 host", 0)).toContainText("installed");
  await hang(hostRow(page, "Wave 2 · 1 host", 5)).toContainText("waiting for its wave");
  const ro = (await (await ctx.get(page.url().replace(/^.*\/rollouts\//, "/api/v1/rollouts/"))).json()) as {
    id: string;
    hosts: { host_id: string; state: string; plan_id: string | null }[];
  };
  const ro4 = ro.hosts.find((h) => h.host_id === hostId(4))!;
  const p4 = await planOf(ro4.host_id, ro4.plan_id!);
  expect([p4.state, p4.revert_by]).toEqual(["reverted", "system"]);
  expect(ro.hosts.find((h) => h.host_id === hostId(5))!.plan_id, "the last wave got no plan").toBeNull();
  await page.getByRole("link", { name: "← plan" }).click();
  await hang(page.getByRole("table", { name: "Roll-outs of this plan" }).getByRole("row")).toHaveCount(3);

  await page.goBack();
  await page.getByRole("button", { name: "Revert everywhere" }).click();
  await hang(page.getByTestId("rollout-state")).toHaveText("reverted everywhere");
  await hang(hostRow(page, "Wave 2 · 1 host", 5)).toContainText("skipped");
});
