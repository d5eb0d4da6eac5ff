// SPDX-License-Identifier: Apache-2.0
// bench/flame: the flame graph of the host and range bench/flame.py seeded (HOTPATH_FLAME_HOST, _FROM,
// _TO), opened in Chromium on four new pages: the first visit (the browser never saw this host; the
// host page's code may not be in its cache yet), a new page with the browser's storage of the host
// emptied first but its hint left (cold, two requests: the definitions asked for apart, for
// comparison), one with both emptied (cold: the console's code cached, nothing of the host kept, the
// definitions asked for with the samples), and one with the storage the previous one left (warm
// storage: the definitions kept in IndexedDB). Each: time from
// navigation start until the canvas is drawn, and where it went (the page until the samples' request,
// that request, the definitions' request, the worker, the drawing: the Resource Timing entries and the
// console's "hotpath:flame-loaded" mark). Then a second view in the same page (the range a second
// shorter): time from the link until drawn; and every main-thread task over 50 ms (a long-task
// PerformanceObserver). Signs in by itself: it runs without the setup project, whose wait for this
// machine's catalog the seeded host does not need.
import { test, expect } from "@playwright/test";

declare global {
  interface Window {
    __longtasks: number[];
  }
}

test.use({ storageState: { cookies: [], origins: [] } });

/** What a Chromium trace (Trace Event format) says ran in each main-thread task of 50 ms or more: the
 *  task's length and its longest events (script evaluated, function called, style, layout, paint,
 *  garbage collection), each with the script or function it names, and when it started against the
 *  console's "hotpath:flame-loaded" mark (the worker's tree back on the page). */
function longTasks(trace: Buffer): string[] {
  type Data = { url?: string; functionName?: string; type?: string };
  type Ev = {
    name: string;
    ph: string;
    ts: number;
    dur?: number;
    pid: number;
    tid: number;
    args?: { name?: string; data?: Data; beginData?: Data };
  };
  const events = (JSON.parse(trace.toString()) as { traceEvents: Ev[] }).traceEvents;
  const main = new Set(
    events
      .filter((e) => e.ph === "M" && e.name === "thread_name" && e.args?.name === "CrRendererMain")
      .map((e) => `${e.pid}:${e.tid}`),
  );
  const onMain = events.filter((e) => e.ph === "X" && e.dur !== undefined && main.has(`${e.pid}:${e.tid}`));
  const loaded = events.find((e) => e.name === "hotpath:flame-loaded")?.ts;
  const out: string[] = [];
  for (const task of onMain.filter((e) => e.name === "RunTask" && e.dur! >= 50_000)) {
    const inside = onMain
      .filter(
        (e) =>
          e !== task &&
          e.pid === task.pid &&
          e.tid === task.tid &&
          e.ts >= task.ts &&
          e.ts + e.dur! <= task.ts + task.dur! &&
          !e.name.endsWith("RunTask") &&
          e.dur! >= 5_000,
      )
      .sort((a, b) => b.dur! - a.dur!)
      .slice(0, 8)
      .map((e) => {
        const d = e.args?.data ?? e.args?.beginData ?? {};
        const what = [d.url?.replace(/^.*\//, ""), d.functionName, d.type].filter(Boolean).join(" ");
        return `${e.name}${what ? ` (${what})` : ""} ${Math.round(e.dur! / 1000)} ms`;
      });
    const when =
      loaded === undefined ? "" : ` (starting ${Math.round((task.ts - loaded) / 1000)} ms from the loaded mark)`;
    out.push(`${Math.round(task.dur! / 1000)} ms${when}: ${inside.join(", ") || "no event of 5 ms or more inside"}`);
  }
  return out;
}

test("flame graph of a seeded hour", async ({ page, browser }) => {
  test.setTimeout(600_000);
  const host = process.env.HOTPATH_FLAME_HOST!;
  const from = process.env.HOTPATH_FLAME_FROM!;
  const to = process.env.HOTPATH_FLAME_TO!;
  await page.goto("/");
  await page.getByLabel("Username").fill("admin");
  await page.getByLabel("Password").fill(process.env.HOTPATH_E2E_ADMIN_PASSWORD!);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Hosts" })).toBeVisible();
  await page.addInitScript(() => {
    window.__longtasks = [];
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) window.__longtasks.push(e.duration);
    }).observe({ type: "longtask", buffered: true });
  });
  const drawn: number[] = [];
  const longest: number[] = [];
  // "cold, two requests": the storage emptied but its hint left saying the host is kept, so the page
  // asks for the samples alone and then for the definitions apart (as before the hint), for comparison.
  const rounds = ["first visit", "cold, two requests", "cold", "warm storage"];
  for (let round = 0; round < rounds.length; round++) {
    if (rounds[round].startsWith("cold")) {
      // Empty what the first visit kept of this host (the console's IndexedDB and its localStorage
      // hint), from a page of the origin that holds no flame worker.
      await page.goto("/");
      await page.evaluate(
        (round) =>
          new Promise<void>((resolve, reject) => {
            if (round === 2) localStorage.removeItem("hotpath-flame-kept");
            const r = indexedDB.deleteDatabase("hotpath-flame");
            r.onsuccess = () => resolve();
            r.onerror = () => reject(new Error("could not empty the console's storage"));
          }),
        round,
      );
    }
    // The first visit is traced (Chromium's timeline), to say what its long tasks ran.
    if (round === 0)
      await browser.startTracing(page, {
        categories: [
          "blink.user_timing",
          "toplevel",
          "devtools.timeline",
          "disabled-by-default-devtools.timeline",
          "v8",
          "v8.execute",
        ],
      });
    await page.goto(`/hosts/${encodeURIComponent(host)}?tab=flame&from=${from}&to=${to}`);
    // The canvas says how many cells it drew once it has drawn them.
    const ms = await page.waitForFunction(
      () => {
        const c = document.querySelector('[data-testid="flame-canvas"]') as HTMLCanvasElement | null;
        return c && Number(c.dataset.cells) > 1 ? performance.now() : 0;
      },
      undefined,
      { timeout: 300_000, polling: "raf" },
    );
    drawn.push(Math.round(await ms.jsonValue()));
    const parts = await page.evaluate((at) => {
      const res = performance.getEntriesByType("resource") as PerformanceResourceTiming[];
      const last = (part: string) => res.filter((e) => e.name.includes(part)).at(-1);
      const stacks = last("/flamegraph/stacks");
      const defs = last("/flamegraph/definitions");
      const loaded = performance.getEntriesByName("hotpath:flame-loaded").at(-1)?.startTime;
      if (!stacks || loaded === undefined) return "not measured (no samples request or no loaded mark)";
      const answered = Math.max(stacks.responseEnd, defs?.responseEnd ?? 0);
      const r = (v: number) => Math.round(v);
      return (
        `page ${r(stacks.startTime)} ms, samples ${r(stacks.responseEnd - stacks.startTime)} ms, ` +
        (defs
          ? `definitions ${r(defs.responseEnd - defs.startTime)} ms (asked ${r(defs.startTime - stacks.responseEnd)} ms after the samples), `
          : "definitions none asked, ") +
        `worker ${r(loaded - answered)} ms, draw ${r(at - loaded)} ms`
      );
    }, drawn[round]);
    await page.waitForTimeout(500); // tasks that end after the first drawing (labels, tooltips) count too
    longest.push(Math.round(await page.evaluate(() => Math.max(0, ...window.__longtasks))));
    if (round === 0)
      for (const t of longTasks(await browser.stopTracing()))
        console.log(`flame first visit's long task (traced): ${t}`);
    const cells = await page.getByTestId("flame-canvas").getAttribute("data-cells");
    const said = await page.getByTestId("flame-summary").textContent();
    console.log(
      `flame round ${round + 1} (${rounds[round]}): drawn ${drawn[round]} ms after navigation start, ${cells} cells, longest task ${longest[round]} ms; summary: ${said}`,
    );
    console.log(`flame ${rounds[round]} parts: ${parts}`);
  }
  // A second view in the same page (the range a second shorter: a new reply, the same stacks), reached
  // as a link would, without loading the page again: the flame worker keeps the stacks' definitions.
  const later = new Date(Date.parse(from) + 1000).toISOString();
  const warm = await page.evaluate(
    (url) =>
      new Promise<number>((resolve) => {
        const t0 = performance.now();
        history.pushState(null, "", url);
        dispatchEvent(new PopStateEvent("popstate"));
        const poll = () => {
          const c = document.querySelector('[data-testid="flame-canvas"]') as HTMLCanvasElement | null;
          if (c && Number(c.dataset.cells) > 1 && c.dataset.round !== "old") resolve(performance.now() - t0);
          else requestAnimationFrame(poll);
        };
        const old = document.querySelector('[data-testid="flame-canvas"]') as HTMLCanvasElement | null;
        if (old) old.dataset.round = "old"; // drawn for the previous view
        poll();
      }),
    `/hosts/${encodeURIComponent(host)}?tab=flame&from=${later}&to=${to}`,
  );
  await page.waitForTimeout(500);
  longest.push(Math.round(await page.evaluate(() => Math.max(0, ...window.__longtasks))));
  const summary = await page.getByTestId("flame-summary").textContent();
  console.log(`flame round 5 (same page): drawn ${Math.round(warm)} ms after the link, summary: ${summary}`);
  console.log(`flame drawn cold, two requests: ${drawn[1]} ms (a new page, no definitions kept, asked apart)`);
  console.log(`flame drawn cold: ${drawn[2]} ms (a new page, no definitions kept)`);
  console.log(`flame drawn warm storage: ${drawn[3]} ms (a new page, definitions kept in the browser's storage)`);
  console.log(`flame warm view: ${Math.round(warm)} ms (a second view in the same page)`);
  console.log(`flame longest task: ${Math.max(...longest)} ms (all five views)`);
});
