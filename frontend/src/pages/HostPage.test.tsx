// SPDX-License-Identifier: Apache-2.0
import { afterEach, describe, expect, it, vi } from "vitest";
import { screen, within } from "@testing-library/react";
import { renderApp } from "../test/render";
import { host, json, routeFetch } from "../test/fixtures";
import { setSession } from "../api/session";

function timeline() {
  const end = Date.now();
  const start = end - 120 * 30_000;
  return {
    start: new Date(start).toISOString(),
    end: new Date(end).toISOString(),
    bucket_s: 30,
    buckets: Array.from({ length: 120 }, (_, i) => ({
      start: new Date(start + i * 30_000).toISOString(),
      covered_ms: i >= 40 && i < 50 ? 0 : 30_000,
    })),
    gaps: [
      {
        id: 1,
        start: new Date(start + 40 * 30_000).toISOString(),
        end: new Date(start + 50 * 30_000).toISOString(),
        messages: 300,
        reason: "the agent's buffer of unacknowledged data was full",
        source: "agent",
      },
    ],
  };
}

describe("host page", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("flags a skewed clock and refused batches, and marks recorded gaps on the time strip", async () => {
    setSession({ token: "t", user: { id: "v", username: "viewer", role: "viewer" } });
    vi.stubGlobal(
      "fetch",
      routeFetch({
        "/api/v1/auth/me": () => json({ id: "v", username: "viewer", role: "viewer" }),
        "/api/v1/hosts/host-1": () =>
          json(host({ clock_offset_ms: 3 * 3600_000, clock_skewed: true, refused_batches: 4 })),
        "/api/v1/hosts/host-1/coverage": () => json(timeline()),
        "/api/v1/hosts/host-1/functions": () => json({ total: 0, items: [] }),
        "/api/v1/hosts/host-1/modules": () => json([]),
        "/api/v1/hosts/host-1/hotness": () => json({ window_s: 10, items: [] }),
      }).fetch,
    );
    vi.stubGlobal("WebSocket", undefined);
    renderApp("/hosts/host-1");
    expect(await screen.findByText("clock 3.0 h ahead")).toBeInTheDocument();
    expect(screen.getByText("4 batches refused")).toBeInTheDocument();
    const strip = await screen.findByRole("region", { name: "Data timeline" });
    expect(strip).toHaveTextContent("92 % covered, 1 gap recorded");
    const buckets = within(strip).getAllByTestId("strip-bucket");
    expect(buckets).toHaveLength(120);
    expect(buckets.filter((b) => b.getAttribute("data-coverage") === "none")).toHaveLength(10);
    expect(within(strip).getAllByTestId("strip-gap")).toHaveLength(1);
    expect(within(strip).getByRole("list", { name: "Recorded gaps" })).toHaveTextContent(
      "the agent's buffer of unacknowledged data was full (300 batches, reported by the agent)",
    );
    // Viewers see no admin actions.
    expect(screen.queryByRole("button", { name: "Delete host" })).toBeNull();
  });

  it("shows a retired host as such", async () => {
    setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
    vi.stubGlobal(
      "fetch",
      routeFetch({
        "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
        "/api/v1/hosts/host-1": () => json(host({ status: "retired", enrolled: false, online: false })),
        "/api/v1/hosts/host-1/coverage": () => json(timeline()),
        "/api/v1/hosts/host-1/functions": () => json({ total: 0, items: [] }),
        "/api/v1/hosts/host-1/modules": () => json([]),
        "/api/v1/hosts/host-1/hotness": () => json({ window_s: 10, items: [] }),
      }).fetch,
    );
    vi.stubGlobal("WebSocket", undefined);
    renderApp("/hosts/host-1");
    expect(await screen.findByText("retired")).toBeInTheDocument();
    expect(screen.getByRole("button", { name: "Delete host" })).toBeInTheDocument();
    expect(screen.queryByRole("button", { name: "Retire host" })).toBeNull();
  });

  it("says an offline host's stream is held by no one, and the nav's links read as separate words", async () => {
    setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
    vi.stubGlobal(
      "fetch",
      routeFetch({
        "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
        "/api/v1/hosts/host-1": () => json(host({ online: false, replica: "replica-a" })),
        "/api/v1/hosts/host-1/coverage": () => json(timeline()),
        "/api/v1/hosts/host-1/functions": () => json({ total: 0, items: [] }),
        "/api/v1/hosts/host-1/modules": () => json([]),
        "/api/v1/hosts/host-1/hotness": () => json({ window_s: 10, items: [] }),
      }).fetch,
    );
    vi.stubGlobal("WebSocket", undefined);
    renderApp("/hosts/host-1");
    const stream = await screen.findByTestId("host-stream");
    expect(stream).toHaveTextContent("none: the host is offline (last held by replica-a)");
    expect(stream).not.toHaveTextContent(/^held by/);
    const nav = await screen.findByRole("navigation", { name: "Main" });
    await vi.waitFor(() => expect(within(nav).getByRole("link", { name: "Admin" })).toBeInTheDocument());
    expect(nav.textContent).toMatch(/All hosts\s+Installed plans\s+Roll-outs\s+Admin/);
  });
});
