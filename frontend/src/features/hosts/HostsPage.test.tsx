// SPDX-License-Identifier: Apache-2.0
import { afterEach, describe, expect, it, vi } from "vitest";
import { screen, within } from "@testing-library/react";
import { renderApp } from "../../test/render";
import { host, json, routeFetch } from "../../test/fixtures";
import { setSession } from "../../api/session";

describe("hosts page", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("lists each host with kernel, status, catalog and the reason for each unavailable capability", async () => {
    setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
    const offline = host({
      id: "h2",
      hostname: "box2",
      online: false,
      catalog_complete: false,
      l1i: null,
      sample_frequency_hz: 0,
      sample_event: "",
    });
    vi.stubGlobal(
      "fetch",
      routeFetch({
        "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
        "/api/v1/hosts": () => json([host(), offline]),
      }).fetch,
    );
    vi.stubGlobal("WebSocket", undefined);
    renderApp("/hosts");
    expect(await screen.findByRole("heading", { name: "Hosts" })).toBeInTheDocument();
    const rows = await screen.findAllByRole("row");
    const row1 = rows.find((r) => within(r).queryByRole("link", { name: "box1" }))!;
    expect(row1).toHaveTextContent("6.18.0-test");
    expect(within(row1).getByText("online")).toBeVisible();
    expect(row1).toHaveTextContent("120,000 functions, 900,000 blocks");
    expect(row1).toHaveTextContent("32 KiB, 64 B lines, 8-way");
    expect(within(row1).getByRole("link", { name: "box1" })).toHaveAttribute("href", "/hosts/host-1");
    expect(within(row1).getByText(/no PMU in this VM/)).toBeVisible();

    const row2 = rows.find((r) => within(r).queryByRole("link", { name: "box2" }))!;
    expect(row2).toHaveTextContent(/offline · last seen \d+ s ago/);
    expect(within(row2).queryByText("online")).toBeNull();
    expect(row2).toHaveTextContent("catalog incomplete");
    // Unmeasurable figures say so instead of showing a number.
    expect(row2).toHaveTextContent("unavailable (the agent did not report it)");
    expect(row2).toHaveTextContent("unavailable (the agent reported no sampling source)");
  });

  it("shows the server's reason when the host list cannot be loaded", { timeout: 10_000 }, async () => {
    setSession({ token: "t", user: null });
    vi.stubGlobal(
      "fetch",
      routeFetch({
        "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
        "/api/v1/hosts": () => json({ detail: "Database unavailable" }, 500),
      }).fetch,
    );
    vi.stubGlobal("WebSocket", undefined);
    renderApp("/hosts");
    // Server errors are retried twice with backoff before the message shows.
    expect(await screen.findByRole("alert", {}, { timeout: 8000 })).toHaveTextContent(
      "Could not load hosts: Database unavailable",
    );
  });
});
