// SPDX-License-Identifier: Apache-2.0
// Shared helpers for the browser tests: the stack's coordinates (set by e2e/run.sh), an
// authenticated API request context for cross-checking what the console shows, and a real
// kernel workload.
import { APIRequestContext, Page, expect, request } from "@playwright/test";
import { spawn, ChildProcess } from "node:child_process";
import { closeSync, openSync, readFileSync, readSync } from "node:fs";
import { setPriority } from "node:os";

export const baseURL = process.env.HOTPATH_E2E_URL ?? "http://127.0.0.1:18080";
export const dataDir = process.env.HOTPATH_E2E_DATA_DIR ?? "";
export const hostname = process.env.HOTPATH_E2E_HOSTNAME ?? "";
export const adminPassword = process.env.HOTPATH_E2E_ADMIN_PASSWORD ?? "";

/** How long a view may take to show what an agent or a query of stored data answers (a block's
 * instructions, a range's first top-functions or compare page, a flame graph, a measurement's state and
 * counts, the code tree's first items) before the wait is called a hang: the backend gives an agent
 * command 15 s (HOTPATH_COMMAND_TIMEOUT_S) and the console asks again. Run beside a loaded full test run
 * (load average ~10, session 19) such waits took longer than the suite's default 20 s; waits for what the
 * page itself renders from data it already has keep that default. Not a speed check: a passing wait goes
 * on as soon as what it waits for holds. */
export const ANSWER_MS = 90_000;

/** This host's agent's samples per second per CPU (e2e/run.sh starts it with --frequency); the tests'
 * statistical margins are derived from it. */
export const sampleHz = Number(process.env.HOTPATH_E2E_SAMPLE_HZ ?? 997);

/** An API client signed in as a user. */
export async function apiAs(username: string, password: string): Promise<APIRequestContext> {
  const anon = await request.newContext({ baseURL });
  const res = await anon.post("/api/v1/auth/login", { data: { username, password } });
  if (!res.ok()) throw new Error(`login of ${username} failed: ${res.status()} ${await res.text()}`);
  const { access_token } = await res.json();
  await anon.dispose();
  return request.newContext({ baseURL, extraHTTPHeaders: { Authorization: `Bearer ${access_token}` } });
}

/** An API client signed in as admin, for reading what the console should show. */
export async function api(): Promise<APIRequestContext> {
  return apiAs("admin", adminPassword);
}

/** The id of this machine's host as the backend knows it (the agent's host id: /etc/machine-id). */
export async function thisHostId(ctx: APIRequestContext): Promise<string> {
  const hosts = await (await ctx.get("/api/v1/hosts")).json();
  const machineId = readFileSync("/etc/machine-id", "utf8").trim();
  const h = hosts.find((x: { id: string }) => x.id === machineId);
  if (!h)
    throw new Error(
      `host ${hostname} not registered; hosts: ${JSON.stringify(hosts.map((x: { hostname: string }) => x.hostname))}`,
    );
  return h.id;
}

/** Wait until the host's catalog is stored, so the tree and function views have data. */
export async function waitForCatalog(ctx: APIRequestContext, hostId: string, timeoutMs = 120_000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const h = await (await ctx.get(`/api/v1/hosts/${hostId}`)).json();
    if (h.online && h.catalog_complete) return h;
    if (Date.now() > end) throw new Error(`catalog not complete after ${timeoutMs} ms: ${JSON.stringify(h)}`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/** An admin API client and this machine's host id, once the host's catalog is stored. */
export async function readyHost(): Promise<{ ctx: APIRequestContext; hostId: string }> {
  const ctx = await api();
  const hostId = await thisHostId(ctx);
  await waitForCatalog(ctx, hostId);
  return { ctx, hostId };
}

/** A workload process at a raised priority (nice -10, where the tests run as root, as CI does): the
 *  tests judge what Hotpath shows of a workload, so a loaded machine's other work must not decide
 *  whether the workload gets a core. At nice -10 it weighs as much as nine programs at nice 0. */
function startWorkload(program: string, args: string[]): ChildProcess {
  const proc = spawn(program, args, { stdio: "ignore" });
  try {
    setPriority(proc.pid!, -10);
  } catch {
    // Not root: the workload runs at the default priority.
  }
  return proc;
}

/** A real kernel workload: `dd` reading /dev/zero one byte per read(2), until stopped. */
export function startReadLoop(): ChildProcess {
  return startWorkload("dd", ["if=/dev/zero", "of=/dev/null", "bs=1"]);
}

/** A kernel workload no other test or program here runs: reading /dev/urandom, whose time goes to the
 *  kernel's ChaCha20 (chacha_permute), so its samples are this workload's alone. */
export function startRandomReadLoop(): ChildProcess {
  return startWorkload("dd", ["if=/dev/urandom", "of=/dev/null", "bs=65536"]);
}

/** A running process's system (kernel) CPU time in seconds, from /proc/PID/stat (stime, in clock ticks
 *  of 1/100 s on Linux). The read loop's tests derive their margins from it. */
export function systemSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" "); // fields from the 3rd (state) on
  return Number(fields[15 - 3]) / 100; // field 15: stime
}

/** Wait at least `ms`, then on until the process has `seconds` of kernel CPU time (at most a minute
 *  more): on a loaded machine a read loop gets less of a core, so it runs longer instead of giving a
 *  range with too little of it. Returns the kernel seconds it had. */
export async function runForKernelSeconds(page: Page, pid: number, ms: number, seconds: number): Promise<number> {
  await page.waitForTimeout(ms);
  for (let i = 0; i < 60 && systemSeconds(pid) < seconds; i++) await page.waitForTimeout(1000);
  return systemSeconds(pid);
}

/** The pid of the running agent, as scripts/run.sh records it. */
export function agentPid(): number {
  return Number(readFileSync(`${dataDir}/run/agent.pid`, "utf8").trim());
}

export async function openHost(page: Page) {
  const machineId = readFileSync("/etc/machine-id", "utf8").trim();
  await page.goto("/");
  await page.locator(`a[href="/hosts/${machineId}"]`).filter({ hasText: hostname }).first().click();
}

/** Start a fixture program and wait until it prints "ready" (at most 30 s); its process and output. */
export async function startReadyProgram(
  program: string,
  args: string[],
): Promise<{ proc: ChildProcess; out: () => string }> {
  const proc = spawn(program, args, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  proc.stdout!.on("data", (d) => (out += d));
  proc.stderr!.on("data", (d) => (out += d));
  const end = Date.now() + 30_000;
  while (!out.includes("ready")) {
    if (proc.exitCode !== null || Date.now() > end) throw new Error(`the fixture did not start: ${out}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { proc, out: () => out };
}

/** A host command as the REST API answers it (its result's shape depends on its kind). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type HostCommand = Record<string, any> & { state: string };

/** Poll a host command (its REST path) until it is done, failed or cancelled; the command. */
export async function waitCommandDone(ctx: APIRequestContext, path: string, timeoutMs = 60_000): Promise<HostCommand> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const c = (await (await ctx.get(path)).json()) as HostCommand;
    if (["done", "failed", "cancelled"].includes(c.state)) return c;
    if (Date.now() > end) throw new Error(`command not done: ${JSON.stringify(c)}`);
    await new Promise((r) => setTimeout(r, 300));
  }
}

/** n bytes of a process's memory at an address, through /proc/PID/mem (what the program runs). */
export function readMem(pid: number, address: bigint, n: number): Buffer {
  const fd = openSync(`/proc/${pid}/mem`, "r");
  try {
    const buf = Buffer.alloc(n);
    expect(readSync(fd, buf, 0, n, address)).toBe(n);
    return buf;
  } finally {
    closeSync(fd);
  }
}
