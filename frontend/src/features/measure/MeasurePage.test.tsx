// SPDX-License-Identifier: Apache-2.0
import { afterEach, describe, expect, it, vi } from "vitest";
import { screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { renderApp } from "../../test/render";
import { host, json, routeFetch } from "../../test/fixtures";
import { setSession } from "../../api/session";

const HARDWARE = ["Cycles", "Instructions", "I-cache stall cycles", "Branch-mispredict cycles"];

function stub(pmu: { available: boolean; detail: string }) {
  setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
  const h = host({ capabilities: [{ name: "hardware_pmu", ...pmu }] });
  vi.stubGlobal("fetch", routeFetch({
    "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
    "/api/v1/hosts/host-1": () => json(h),
    "/api/v1/hosts/host-1/measurements": () => json([]),
  }).fetch);
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
});
