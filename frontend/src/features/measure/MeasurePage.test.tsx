// SPDX-License-Identifier: Apache-2.0
import { afterEach, describe, expect, it, vi } from "vitest";
import { screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { renderApp } from "../../test/render";
import { host, json, routeFetch } from "../../test/fixtures";
import { setSession } from "../../api/session";

const HARDWARE = ["Cycles", "Instructions", "I-cache stall cycles", "Branch-mispredict cycles"];

const TARGETS = [
  { id: "kernel", kind: "kernel", state: "attached", detail: "", pid: null, command: null, active_measurements: 0 },
  {
    id: "p4242-1000",
    kind: "process",
    state: "attached",
    detail: "",
    pid: 4242,
    command: "nginx",
    active_measurements: 0,
  },
];

function stub(
  pmu: { available: boolean; detail: string },
  more: { name: string; available: boolean; detail: string }[] = [],
  targets: unknown[] | null = null,
) {
  setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
  const h = host({ capabilities: [{ name: "hardware_pmu", ...pmu }, ...more] });
  vi.stubGlobal(
    "fetch",
    routeFetch({
      "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
      "/api/v1/hosts/host-1": () => json(h),
      "/api/v1/hosts/host-1/measurements": () => json([]),
      ...(targets ? { "/api/v1/hosts/host-1/targets": () => json(targets) } : {}),
    }).fetch,
  );
  vi.stubGlobal("WebSocket", undefined);
}

describe("measure page metrics", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("states the PMU's reason once for the hardware group and lists its four metrics disabled", async () => {
    stub({ available: false, detail: "no PMU in this VM" });
    renderApp("/hosts/host-1/measure?target=kernel");
    const group = await screen.findByRole("group", { name: "Hardware metrics unavailable: no PMU in this VM" });
    expect(screen.getAllByText(/no PMU in this VM/)).toHaveLength(1);
    for (const label of HARDWARE) {
      const box = within(group).getByRole("checkbox", { name: label });
      expect(box).toBeDisabled();
      expect(box).not.toBeChecked();
    }
    // The software metrics stay selectable.
    const metrics = screen.getByRole("group", { name: "Metrics" });
    const concurrency = within(metrics).getByRole("checkbox", { name: "Concurrency" });
    expect(concurrency).toBeEnabled();
    await userEvent.setup().click(concurrency);
    expect(concurrency).toBeChecked();
  });

  it("offers the hardware metrics with the others when the host has a PMU", async () => {
    stub({ available: true, detail: "" });
    renderApp("/hosts/host-1/measure?target=kernel");
    const metrics = await screen.findByRole("group", { name: "Metrics" });
    await vi.waitFor(() => expect(within(metrics).getByRole("checkbox", { name: "Cycles" })).toBeEnabled());
    expect(screen.queryByText(/Hardware metrics unavailable/)).toBeNull();
    for (const label of HARDWARE) expect(within(metrics).getByRole("checkbox", { name: label })).toBeEnabled();
  });

  it("does not tick kernel timers on a host without fentry or kprobes, and says why once", async () => {
    const off = (name: string, detail: string) => ({ name, available: false, detail });
    stub(
      { available: false, detail: "no PMU" },
      [
        off("fentry", "EPERM"),
        off("fexit", "EPERM"),
        off("kprobes", "no kprobe PMU"),
        off("kretprobes", "no kprobe PMU"),
      ],
      TARGETS,
    );
    renderApp("/hosts/host-1/measure?target=kernel");
    const group = await screen.findByRole("group", { name: "Unavailable on this host" });
    for (const label of ["Wall time", "Virtual time (on CPU)", "Concurrency"]) {
      const box = within(group).getByRole("checkbox", { name: label });
      expect(box).toBeDisabled();
      expect(box).not.toBeChecked();
    }
    expect(within(group).getAllByText(/needs fentry and fexit, or kprobes and kretprobes/)).toHaveLength(3);
    const metrics = screen.getByRole("group", { name: "Metrics" });
    expect(within(metrics).getByRole("checkbox", { name: "Count" })).toBeChecked();
    expect(screen.getByRole("heading", { level: 1 })).toHaveTextContent("Measure the kernel");
  });

  it("titles a process target by its command and pid, and refuses a made-up target", async () => {
    stub({ available: false, detail: "no PMU" }, [], TARGETS);
    const { unmount } = renderApp("/hosts/host-1/measure?target=p4242-1000");
    expect(await screen.findByRole("heading", { level: 1, name: "Measure nginx (pid 4242)" })).toBeInTheDocument();
    unmount();
    renderApp("/hosts/host-1/measure?target=p1-2");
    expect(await screen.findByRole("heading", { level: 1, name: "Target not found" })).toBeInTheDocument();
    expect(screen.getByRole("alert")).toHaveTextContent("This host has no target “p1-2”");
    expect(screen.queryByRole("button", { name: "Start" })).toBeNull();
  });
});
