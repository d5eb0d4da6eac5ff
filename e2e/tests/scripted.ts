// SPDX-License-Identifier: Apache-2.0
// Scripted agents for the browser tests: stand-ins for other machines of a fleet, which cannot exist
// here. Each is backend/tests/scripted_agent_cli.py (the backend tests' fake agent, tests.scripted_agent,
// run as a program; see its docstring): it enrols with a one-time token the admin creates over REST,
// connects over mutual TLS, reports its labels in Hello, uploads its catalog, answers the backend's
// commands as scripted, and talks to the test one JSON object a line.
import type { APIRequestContext } from "@playwright/test";
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";

const backendDir = join(__dirname, "..", "..", "backend");
const grpcPort = process.env.HOTPATH_GRPC_PORT ?? "15051";

export interface ScriptedSpec {
  /** The host id (also its hostname). */
  id: string;
  /** Agents given one tag share one kernel build. */
  kernelTag: string;
  /** Report this kernel build id and release instead of the tag's (a fake joining a real host's build group). */
  kernelBuildId?: string;
  kernelRelease?: string;
  labels?: Record<string, string>;
  /** Samples per one-second batch by scripted vmlinux function, sent from `start` on `send`. */
  samples?: Record<string, number>;
  start?: number;
  seconds?: number;
  /** Send the samples as kernel call stacks (each function called from __x64_sys_read), for flame graphs. */
  stacks?: boolean;
  /** What its ComparePlan reports: slower injects a regression (the guard reverts the plan there). */
  compare?: "within-noise" | "slower";
  /** Why it was made, in the enrolment token's note. */
  note: string;
}

/** One scripted agent: its program, its host id, its kernel build, and the JSON lines it wrote. */
export interface Scripted {
  id: string;
  buildId: string;
  release: string;
  /** The catalog digest of the scripted process it attaches (one build for every scripted agent). */
  processDigest: string;
  proc: ChildProcess;
  said: Record<string, unknown>[];
  err: string;
}

export const exited = (a: Scripted) => a.proc.exitCode !== null || a.proc.signalCode !== null;

/** The first line the scripted agent wrote with this key, once it has (a bound for a hang, not a speed
 *  check: a passing test goes on as soon as the line is there). */
export async function saidSo(a: Scripted, what: string, hangMs: number): Promise<Record<string, unknown>> {
  const end = Date.now() + hangMs;
  for (;;) {
    const line = a.said.find((l) => what in l);
    if (line) return line;
    if (exited(a) || Date.now() > end)
      throw new Error(`scripted agent ${a.id} did not say "${what}" (exit ${a.proc.exitCode}): ${a.err}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Start one scripted agent with a fresh enrolment token; resolves once it has connected. */
export async function startScripted(ctx: APIRequestContext, spec: ScriptedSpec, hangMs: number): Promise<Scripted> {
  const made = await ctx.post("/api/v1/enrolment-tokens", {
    data: { note: spec.note, hours: 1, host_id: spec.id },
  });
  if (made.status() !== 201) throw new Error(`enrolment token for ${spec.id}: ${made.status()} ${await made.text()}`);
  const { token, ca_pem, enroll_port } = await made.json();
  const args = ["-m", "tests.scripted_agent_cli", "--server", `127.0.0.1:${grpcPort}`];
  args.push("--enroll", `127.0.0.1:${enroll_port}`, "--host-id", spec.id, "--hostname", spec.id);
  args.push("--kernel-tag", spec.kernelTag, "--hang-s", String(hangMs / 1000));
  if (spec.kernelBuildId) args.push("--kernel-build-id", spec.kernelBuildId);
  if (spec.kernelRelease) args.push("--kernel-release", spec.kernelRelease);
  if (spec.start !== undefined) args.push("--start", String(spec.start));
  if (spec.seconds !== undefined) args.push("--seconds", String(spec.seconds));
  if (spec.compare) args.push("--compare", spec.compare);
  if (spec.stacks) args.push("--stacks");
  for (const [k, v] of Object.entries(spec.labels ?? {})) args.push("--label", `${k}=${v}`);
  for (const [f, n] of Object.entries(spec.samples ?? {})) args.push("--samples", `${f}=${n}`);
  const proc = spawn(join(backendDir, ".venv", "bin", "python"), args, {
    cwd: backendDir,
    stdio: ["pipe", "pipe", "pipe"],
  });
  const a: Scripted = { id: spec.id, buildId: "", release: "", processDigest: "", proc, said: [], err: "" };
  createInterface({ input: proc.stdout! }).on("line", (l) => a.said.push(JSON.parse(l)));
  proc.stderr!.on("data", (d) => (a.err += d));
  proc.stdin!.write(JSON.stringify({ token, ca_pem }) + "\n");
  let connected: Record<string, unknown>;
  try {
    connected = await saidSo(a, "connected", hangMs);
  } catch (e) {
    a.proc.kill("SIGKILL"); // nothing is left running when it never connected
    throw e;
  }
  a.buildId = String(connected.build_id);
  a.release = String(connected.kernel_release);
  a.processDigest = String(connected.process_digest);
  return a;
}

/** Stop a scripted agent as an agent that exits cleanly (SIGTERM ends its stream); SIGKILL after 10 s. */
export async function stopScripted(a: Scripted) {
  if (exited(a)) return;
  const gone = new Promise((r) => a.proc.once("exit", r));
  a.proc.kill("SIGTERM");
  const timer = setTimeout(() => a.proc.kill("SIGKILL"), 10_000);
  await gone;
  clearTimeout(timer);
}
