// SPDX-License-Identifier: Apache-2.0
// Call stacks against the live kernel: a flame graph of a time range while a workload this test runs
// shows the workload's kernel functions above their callers, narrowed to its process; clicking a frame
// zooms into it and opens its function, whose page lists its callers from the stacks; the pprof
// download is a real profile (read by the backend's protobuf bindings, by go tool pprof where Go is
// installed, and imported by speedscope's own page in Chromium); comparing
// two ranges as a differential flame graph shows the workload this test ran in the second one as growth.
import { test, expect, type APIRequestContext, type Page } from "@playwright/test";
import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { basename, join } from "node:path";
import { pathToFileURL } from "node:url";
import { readyHost, startReadLoop, startRandomReadLoop, runForKernelSeconds, ANSWER_MS, sampleHz } from "./helpers";

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** Wait until the host's stack samples cover [from, to) with at least `min` samples of process `pid`. */
async function waitForStacks(
  ctx: APIRequestContext,
  hostId: string,
  from: number,
  to: number,
  pid: number,
  min: number,
) {
  await expect
    .poll(
      async () => {
        const fg = await (
          await ctx.get(`/api/v1/hosts/${hostId}/flamegraph?from=${iso(from)}&to=${iso(to)}&pid=${pid}`)
        ).json();
        return fg.samples ?? 0;
      },
      { timeout: 60_000, intervals: [2_000] },
    )
    .toBeGreaterThanOrEqual(min);
}

/** Run a read loop (dd reading /dev/zero a byte at a time: vfs_read called from ksys_read) for `ms`,
 *  then wait until the backend holds at least `min` of its stack samples; the range it ran and its pid. */
async function recordReadLoop(page: Page, ctx: APIRequestContext, hostId: string, ms: number, min: number) {
  const from = Date.now();
  const loop = startReadLoop();
  let to = 0;
  try {
    await page.waitForTimeout(ms);
    to = Date.now();
  } finally {
    loop.kill();
  }
  const pid = loop.pid!;
  await waitForStacks(ctx, hostId, from, to, pid, min);
  return { from, to, pid };
}

test("a flame graph of a time range shows a running workload's functions above their callers, for its process", async ({
  page,
}) => {
  const { ctx, hostId } = await readyHost();
  const { from, to, pid } = await recordReadLoop(page, ctx, hostId, 10_000, 200);
  await page.goto(`/hosts/${hostId}?tab=flame&from=${iso(from)}&to=${iso(to)}&pid=${pid}`);
  await expect(page.getByRole("tab", { name: "Flame graph" })).toHaveAttribute("aria-selected", "true");
  const graph = page.getByRole("group", { name: /^Flame graph of / });
  await expect(graph).toBeVisible({ timeout: ANSWER_MS });
  // Laid out in the worker, every cell drawn on the canvas (which says how many it drew).
  await expect(page.getByTestId("flame-summary")).toContainText("in a worker");
  await expect(page.getByTestId("flame-canvas")).toHaveAttribute("data-cells", /^[1-9][0-9]*$/);
  // The process filter came from the link; the summary counts only its samples.
  await expect(page.getByRole("combobox", { name: "Process" })).toHaveValue(String(pid));
  const vfs = graph.locator('[data-testid="flame-frame"][data-name="vfs_read"]');
  const ksys = graph.locator('[data-testid="flame-frame"][data-name="ksys_read"]');
  await expect(vfs.first()).toBeVisible();
  await expect(ksys.first()).toBeVisible();
  // In a flame graph a callee sits on its caller: vfs_read's cell directly above ksys_read's, inside it.
  const v = (await vfs.first().boundingBox())!;
  const k = (await ksys.first().boundingBox())!;
  expect(Math.round(k.y - v.y)).toBe(18);
  expect(v.x).toBeGreaterThanOrEqual(k.x - 1);
  expect(v.x + v.width).toBeLessThanOrEqual(k.x + k.width + 1);
  // The idle task is left out by default and counted apart.
  await expect(page.getByRole("button", { name: "without idle" })).toHaveAttribute("aria-pressed", "true");

  // Search highlights the read path and says how much of the samples it covers.
  await page.getByRole("searchbox", { name: "Search frames" }).fill("vfs_read");
  await expect(page.getByTestId("flame-matches")).toContainText(/frames match, \d+\.\d % of samples/);

  // Clicking a frame zooms into it, in the URL; a reload keeps the view.
  await vfs.first().click();
  await expect(page).toHaveURL(/fzoom=[^&]*vfs_read/);
  const details = page.getByRole("status", { name: "Selected frame" });
  await expect(details).toContainText("vfs_read");
  // This browser never saw the host: the view asked for its stacks' frames. The reloaded page asks only
  // for stacks with a kernel frame not named yet (a module whose catalog piece is not stored): its
  // flame worker read the others from the browser's storage (IndexedDB).
  const fetched = async () => {
    const said = (await page.getByTestId("flame-summary").textContent()) ?? "";
    return Number(/frames of ([\d,]+) stacks fetched/.exec(said)?.[1].replace(/,/g, "") ?? 0);
  };
  await expect(page.getByTestId("flame-summary")).toContainText(/frames of [\d,]+ stacks fetched/);
  const first = await fetched();
  await page.reload();
  await expect(page.getByRole("status", { name: "Selected frame" })).toContainText("vfs_read");
  await expect(page.getByRole("searchbox", { name: "Search frames" })).toHaveValue("vfs_read");
  await expect(page.getByTestId("flame-summary")).toContainText("in a worker");
  expect(await fetched()).toBeLessThan(first);

  // Open the function: its page lists the callers seen in the stacks.
  await page.getByRole("status", { name: "Selected frame" }).getByRole("link", { name: "Open function" }).click();
  await expect(page.getByRole("heading", { name: "vfs_read", level: 1 })).toBeVisible();
  const callers = page.getByRole("table", { name: "Callers" });
  await expect(callers.getByRole("link", { name: "ksys_read" })).toBeVisible({ timeout: ANSWER_MS });
  await expect(page.getByTestId("calls-summary")).toContainText("sampled stacks");
});

test("double-clicking a frame opens its function", async ({ page }) => {
  const { ctx, hostId } = await readyHost();
  const { from, to, pid } = await recordReadLoop(page, ctx, hostId, 6_000, 100);
  await page.goto(`/hosts/${hostId}?tab=flame&from=${iso(from)}&to=${iso(to)}&pid=${pid}&forient=icicle`);
  const frame = page
    .getByRole("group", { name: /^Flame graph of / })
    .locator('[data-testid="flame-frame"][data-name="ksys_read"]')
    .first();
  await expect(frame).toBeVisible({ timeout: ANSWER_MS });
  await frame.dblclick();
  await expect(page.getByRole("heading", { name: "ksys_read", level: 1 })).toBeVisible();
  await expect(page).toHaveURL(
    new RegExp(`from=${encodeURIComponent(iso(from)).replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`),
  );
});

test("the pprof download is a profile standard tools read", async ({ page }) => {
  // Three readers of the download, one of them a whole second page (speedscope) in this browser.
  test.setTimeout(240_000);
  const { ctx, hostId } = await readyHost();
  const { from, to } = await recordReadLoop(page, ctx, hostId, 6_000, 100);
  await page.goto(`/hosts/${hostId}?tab=flame&from=${iso(from)}&to=${iso(to)}`);
  await expect(page.getByRole("group", { name: /^Flame graph of / })).toBeVisible({ timeout: ANSWER_MS });
  const download = page.waitForEvent("download");
  await page.getByRole("button", { name: "Download pprof" }).click();
  const file = await download;
  expect(file.suggestedFilename()).toMatch(/^hotpath-.*\.pb\.gz$/);
  const path = (await file.path())!;
  const bytes = readFileSync(path);
  expect(bytes[0]).toBe(0x1f); // gzip
  expect(bytes[1]).toBe(0x8b);
  // The backend's bindings, generated from Google's profile.proto, read it back.
  const dir = mkdtempSync(join(tmpdir(), "hotpath-pprof-"));
  const script = join(dir, "read.py");
  writeFileSync(
    script,
    [
      "import gzip, json, sys",
      "sys.path.insert(0, 'backend')",
      "from app.protocol.proto import profile_pb",
      "p = profile_pb.Profile.FromString(gzip.decompress(open(sys.argv[1], 'rb').read()))",
      "st = p.string_table",
      "names = {f.id: st[f.name] for f in p.function}",
      "locs = {l.id: names[l.line[0].function_id] for l in p.location}",
      "frames = sorted({locs[i] for s in p.sample for i in s.location_id})",
      "print(json.dumps({'types': [st[t.type] for t in p.sample_type], 'samples': sum(s.value[0] for s in p.sample), 'frames': frames}))",
    ].join("\n"),
  );
  const parsed = JSON.parse(execFileSync("backend/.venv/bin/python", [script, path], { cwd: "..", encoding: "utf8" }));
  expect(parsed.types).toEqual(["samples", "cpu"]);
  expect(parsed.samples).toBeGreaterThan(100);
  expect(parsed.frames).toContain("vfs_read");
  // And go tool pprof, where the Go toolchain is installed.
  const go = spawnSync("go", ["version"], { encoding: "utf8" });
  if (go.status === 0) {
    const raw = execFileSync("go", ["tool", "pprof", "-raw", path], {
      encoding: "utf8",
      timeout: 120_000,
      maxBuffer: 256 << 20,
    });
    expect(raw).toContain("PeriodType: cpu nanoseconds");
    expect(raw).toContain("vfs_read");
  }
  // And speedscope: its release build from npm (the page its `speedscope FILE` command opens), in this
  // Chromium, imports the download as a user would (Import), and its Sandwich view lists the workload's
  // kernel functions. Its rows are sorted by self time and only the first screenful is drawn: with
  // other busy processes on the host (a guest under QEMU, say) the workload's functions may be further
  // down, so each is found through the view's filter (Ctrl+F), as a user would.
  const viewer = await page.context().newPage();
  const failures: string[] = [];
  viewer.on("pageerror", (e) => failures.push(String(e)));
  await viewer.goto(
    pathToFileURL(join(process.cwd(), "node_modules", "speedscope", "dist", "release", "index.html")).href,
  );
  await viewer.locator('input[type="file"]').setInputFiles(path);
  // Its toolbar names the imported file once the import is done (about 3 s here under load).
  await expect(viewer.locator("body")).toContainText(basename(path), { timeout: 120_000 });
  await viewer.getByText("Sandwich").click();
  await expect(viewer.locator("body")).toContainText("Symbol Name", { timeout: 30_000 });
  for (const name of ["vfs_read", "ksys_read"]) {
    await viewer.keyboard.press("Control+f");
    await viewer.locator("input:not([type])").fill(name); // its search box, at the top right
    await expect(viewer.locator("body")).toContainText(name);
  }
  expect(failures).toEqual([]);
  await viewer.close();
});

test("comparing two ranges as a differential flame graph shows the workload this test ran in the second as growth", async ({
  page,
}) => {
  const { ctx, hostId } = await readyHost();
  const a0 = Date.now();
  await page.waitForTimeout(10_000);
  const b0 = Date.now();
  const loop = startRandomReadLoop(); // reading /dev/urandom: its kernel time goes to chacha_permute
  let kernelSeconds = 0;
  try {
    kernelSeconds = await runForKernelSeconds(page, loop.pid!, 10_000, 2);
  } finally {
    loop.kill();
  }
  const b1 = Date.now();
  // The margins below rest on the loop having had 2 s of kernel time: it runs 10 s, and longer where a
  // loaded machine gives it less of a core; still less after a minute more means it was starved.
  expect(kernelSeconds, "the read loop's kernel CPU seconds in B").toBeGreaterThan(2);
  await waitForStacks(ctx, hostId, b0, b1, loop.pid!, 200);
  await page.goto(
    `/hosts/${hostId}?tab=compare&cview=flame&from=${iso(a0)}&to=${iso(b0)}&b_from=${iso(b0)}&b_to=${iso(b1)}`,
  );
  const graph = page.getByRole("group", { name: "Differential flame graph" });
  await expect(graph).toBeVisible({ timeout: ANSWER_MS });
  await expect(page.getByTestId("diff-summary")).toContainText("Baseline (A):");
  await expect(page.getByTestId("diff-summary")).toContainText("comparison (B):");
  // Which chacha function the kernel's samples land in varies (chacha_permute, or chacha_block_generic
  // where the permutation is inlined or its own cell too narrow to label): the check is on the chacha
  // frame with the most samples in B, whichever it is.
  const diff = await (
    await ctx.get(
      `/api/v1/hosts/${hostId}/flamegraph/diff?a_from=${iso(a0)}&a_to=${iso(b0)}&b_from=${iso(b0)}&b_to=${iso(b1)}`,
    )
  ).json();
  const sums = (i: number) => {
    const nodes = diff.nodes.frame.map((f: number, k: number) => (f === i ? k : -1)).filter((k: number) => k >= 0);
    return {
      a: nodes.reduce((s: number, k: number) => s + diff.nodes.a_total[k], 0),
      b: nodes.reduce((s: number, k: number) => s + diff.nodes.b_total[k], 0),
    };
  };
  const candidates = diff.frames
    .map((f: { name: string }, i: number) => ({ name: f.name, ...sums(i) }))
    .filter((f: { name: string }) => f.name.startsWith("chacha")) as { name: string; a: number; b: number }[];
  expect(candidates.length, "chacha frames in the differential graph").toBeGreaterThan(0);
  const top = candidates.reduce((x, y) => (y.b > x.b ? y : x));
  await page.getByRole("searchbox", { name: "Search frames" }).fill("chacha");
  const chacha = graph.locator(`[data-testid="flame-frame"][data-name="${top.name}"]`).first();
  await expect(chacha).toBeVisible();
  // Its share grew from A to B: the label says by how many points, and the API agrees.
  const label = (await chacha.getAttribute("aria-label"))!;
  const change = /change ([+−])(\d+\.\d) points/.exec(label);
  expect(change, label).not.toBeNull();
  // Margins from the workload: B holds (its seconds) x (CPUs) x sampleHz samples whatever else runs, and
  // the loop's kernel time, mostly in its chacha functions, at least kernelSeconds x sampleHz x 1/2 of
  // them, against about none in A, the quiet period before it. The checks ask for a tenth of that: with
  // 2 s of kernel time in 10 s on 2 CPUs, a share of 5 points in B, so 0.5 points, and at 199 Hz 20 of
  // the ~200 samples expected.
  const loopSamples = kernelSeconds * sampleHz * 0.5;
  const points = (100 * loopSamples) / (((b1 - b0) / 1000) * cpus().length * sampleHz);
  expect(change![1]).toBe("+");
  expect(Number(change![2])).toBeGreaterThan(points / 10);
  expect(top.b).toBeGreaterThan(top.a + loopSamples / 10);
});
