// SPDX-License-Identifier: Apache-2.0
// Measurement from the console on a real compiled process: a program gcc builds here calls
// mx_branch() exactly 1000 times once released (i % 4 == 0 takes one side: 250 and 750), the test
// attaches it by pid on the host page, picks mx_branch and its blocks on the measure page, starts
// count + wall + vtime, releases the program, and reads the exact count and the branch split in the
// live table, with the chart drawn from the measurement's series; then opens mx_branch's CFG with the
// measurement drawn over it: the 250 and 750 blocks and the edge counts the agent derived from them.
// A second test ranks the measured function in the measure page's Layout candidates table.
import { test, expect, type APIRequestContext, type Page } from "@playwright/test";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { openHost, readyHost, ANSWER_MS } from "./helpers";

const FIXTURE = resolve(__dirname, "../../agent/tests/fixtures/measured.c");

function startMeasured(dir: string, n: number): Promise<ChildProcess> {
  const exe = join(dir, "measured");
  execFileSync("gcc", ["-O2", "-g", "-pthread", "-Wl,--build-id", "-o", exe, FIXTURE]);
  const child = spawn(exe, ["calls", String(n)], { stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((ok, fail) => {
    let out = "";
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      if (out.includes("ready")) ok(child);
    });
    child.on("exit", (code) => fail(new Error(`the fixture exited (${code}) before it was ready: ${out}`)));
  });
}

/** Attach the fixture by pid on the host page, wait for its catalog, and open its measure page with
 *  mx_branch and its blocks picked; returns the target's id. */
async function attachAndPick(page: Page, ctx: APIRequestContext, hostId: string, proc: ChildProcess): Promise<string> {
  await openHost(page);
  const targets = page.getByRole("region", { name: "Targets" });
  await targets.getByLabel("Process id or command name").fill(String(proc.pid));
  await targets.getByRole("button", { name: "Attach" }).click();
  await expect(targets.getByRole("status", { name: "Attach command" })).toContainText("done", { timeout: 60_000 });
  const row = targets.locator("tr", { hasText: `pid ${proc.pid}` });
  await expect(row).toContainText("attached");
  const targetId = await row.getAttribute("data-target");
  expect(targetId).toMatch(new RegExp(`^p${proc.pid}-`));

  // The process's catalog must be stored before its functions can be found.
  await expect
    .poll(
      async () => {
        const r = await ctx.get(`/api/v1/hosts/${hostId}/functions?q=mx_branch&target=${targetId}&limit=5`);
        return r.ok() ? (await r.json()).total : 0;
      },
      { timeout: 60_000 },
    )
    .toBeGreaterThan(0);

  await row.getByRole("link", { name: "Measure" }).click();
  // The page is titled by the process (its command and pid), not by the target's id.
  await expect(
    page.getByRole("heading", { level: 1, name: new RegExp(`^Measure \\S+ \\(pid ${proc.pid}\\)$`) }),
  ).toBeVisible();
  await page.getByLabel("Find functions").fill("mx_branch");
  await page.getByLabel("Select mx_branch", { exact: true }).check();
  await expect(page.getByLabel("Blocks of mx_branch")).toBeChecked();
  return targetId!;
}

test("a process attached from the console shows f's exact count and its branch split", async ({ page }) => {
  test.setTimeout(180_000);
  const { ctx, hostId } = await readyHost();
  const dir = mkdtempSync(join(tmpdir(), "hotpath-e2e-measured-"));
  const proc = await startMeasured(dir, 1000);
  try {
    await attachAndPick(page, ctx, hostId, proc);
    for (const m of ["Count", "Wall time", "Virtual time (on CPU)"])
      await expect(page.getByLabel(m, { exact: true })).toBeChecked();
    await page.getByRole("button", { name: "Start" }).click();
    await expect(page.getByRole("status", { name: "Start command" })).toContainText("done", { timeout: 60_000 });
    await expect(page.getByLabel("Measurement state")).toHaveText(/armed|running/, { timeout: ANSWER_MS });

    // Armed: release the program (1000 calls, then it exits and the measurement ends, data kept).
    process.kill(proc.pid!, "SIGUSR1");
    const table = page.getByRole("table", { name: "Measured values" });
    const fn = table.locator("tr[data-resource='mx_branch']");
    await expect(fn.locator("td[data-metric='count'] .value")).toHaveText("1,000 calls", { timeout: 60_000 });
    await expect(fn.locator("td[data-metric='count']")).toContainText("exact");
    await expect(fn.locator("td[data-metric='wall']")).toContainText(/\d+(\.\d+)? (ns|µs|ms|s)\b.*\/call/);
    await expect(fn.locator("td[data-metric='vtime']")).toContainText(/\/call/);
    const blockCounts = table.locator("tr.block-row td[data-metric='count'] .value");
    await expect
      .poll(async () => (await blockCounts.allTextContents()).sort(), { timeout: ANSWER_MS })
      .toEqual(expect.arrayContaining(["250 executions", "750 executions"]));
    await expect(page.getByLabel("Measurement state")).toHaveText("target_exited", { timeout: ANSWER_MS });
    // The chart draws a line for the function from the measurement's series, with a legend.
    await expect(page.locator("figure.measure-chart g.series[data-resource] circle").first()).toBeVisible();
    await expect(page.getByRole("list", { name: "Legend" })).toContainText("mx_branch");

    // mx_branch's CFG with the measurement over it: block heat from the exact counts, and the edges the
    // agent derived from them (KernInst section 4) drawn by count, labelled exact.
    await fn.getByRole("link", { name: "CFG of mx_branch" }).click();
    await expect(page.getByRole("heading", { name: "mx_branch", level: 1 })).toBeVisible();
    await expect(page.getByRole("checkbox", { name: "Measurement" })).toBeChecked();
    await expect(page.getByTestId("measurement-range")).toContainText("blocks exact");
    await expect(page.getByTestId("measurement-range")).toContainText("edges derived");
    const cfgBlocks = page.locator("[data-testid=cfg-block]");
    await expect(cfgBlocks.filter({ hasText: "750 executions · exact" })).toHaveCount(1);
    await expect(cfgBlocks.filter({ hasText: "250 executions · exact" })).toHaveCount(1);
    await expect(cfgBlocks.filter({ hasText: "1,000 executions · exact" }).first()).toBeVisible();
    const edgeCounts = page.locator("[data-testid=cfg-edge-count]");
    await expect
      .poll(async () =>
        edgeCounts.evaluateAll((els) =>
          els.map((e) => `${e.getAttribute("data-count")} ${e.getAttribute("data-label")}`),
        ),
      )
      .toEqual(expect.arrayContaining(["250 exact", "750 exact"]));
    // Thicker for more executions: the 750 side is drawn wider than the 250 side.
    const width = async (count: number) => {
      const id = await edgeCounts
        .and(page.locator(`[data-count="${count}"]`))
        .first()
        .getAttribute("data-edge");
      return Number(await page.locator(`path[data-edge="${id}"]`).getAttribute("stroke-width"));
    };
    expect(await width(750)).toBeGreaterThan(await width(250));
    await expect(page.getByLabel("Measurement legend")).toContainText("executions, exact");
  } finally {
    proc.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a measured process function is ranked in the layout candidates with its exact taken share", async ({ page }) => {
  test.setTimeout(180_000);
  const { ctx, hostId } = await readyHost();
  const dir = mkdtempSync(join(tmpdir(), "hotpath-e2e-layout-"));
  const proc = await startMeasured(dir, 1000);
  try {
    await attachAndPick(page, ctx, hostId, proc);
    await page.getByRole("button", { name: "Start" }).click();
    await expect(page.getByRole("status", { name: "Start command" })).toContainText("done", { timeout: 60_000 });
    await expect(page.getByLabel("Measurement state")).toHaveText(/armed|running/, { timeout: ANSWER_MS });
    process.kill(proc.pid!, "SIGUSR1");
    await expect(page.getByLabel("Measurement state")).toHaveText("target_exited", { timeout: 60_000 });

    // The only function measured with its blocks: all of the measured instructions are its own, and its
    // jumps' taken share comes from the edges derived from the exact counts.
    const table = page.getByRole("table", { name: "Layout candidates" });
    const row = table.getByRole("row").filter({ has: page.getByRole("link", { name: "mx_branch", exact: true }) });
    await expect(row).toContainText("100.0% of the measured functions' instructions", { timeout: 60_000 });
    await expect(row).toContainText(/\d+% of jumps taken/);
    await expect(row).toContainText(/\d+ hot lines? \(\d+\.\d+% of the L1i, \d+ if packed\)/);
    await expect(row.getByRole("button", { name: "Optimize mx_branch" })).toBeEnabled();
  } finally {
    proc.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});
