// SPDX-License-Identifier: Apache-2.0
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { renderApp } from "../../test/render";
import { fnSummary, host, json, routeFetch, sampleDetail } from "../../test/fixtures";
import { setSession } from "../../api/session";

const catalog = {
  total: 4,
  items: [
    fnSummary({ id: 7, name: "vfs_read", address_hex: "ffffffff81234560", block_count: 4 }),
    fnSummary({ id: 8, name: "vfs_readv", address_hex: "ffffffff81300000" }),
    fnSummary({ id: 9, name: "ksys_read", address_hex: "ffffffff81230000" }),
    fnSummary({ id: 10, name: "ext4_file_read_iter", module: "ext4", address_hex: "ffffffffc0010000" }),
  ],
};

function stub() {
  setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
  const routes = routeFetch({
    "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
    "/api/v1/hosts/host-1": () => json(host()),
    "/api/v1/hosts/host-1/functions": () => json(catalog),
    "/api/v1/hosts/host-1/hotness": () => json({ window_s: 10, items: [{ function_id: 9, samples_per_sec: 123 }] }),
    "/api/v1/hosts/host-1/functions/7": () => json(sampleDetail()),
    "/api/v1/hosts/host-1/functions/7/samples": () => json({ function_id: 7, window_s: 10, total: 5, blocks: [{ offset: 0, samples: 5, samples_per_sec: 0.5 }] }),
    "/api/v1/hosts/host-1/top-functions": () => json({ window_s: 10, total_samples: 100, items: [
      { function_id: 9, name: "ksys_read", module: "vmlinux", samples: 60, samples_per_sec: 6, share: 0.6 },
      { function_id: 7, name: "vfs_read", module: "vmlinux", samples: 40, samples_per_sec: 4, share: 0.4 },
    ] }),
  });
  vi.stubGlobal("fetch", routes.fetch);
  vi.stubGlobal("WebSocket", undefined);
  return routes;
}

function treeNames(): string[] {
  return screen.getAllByRole("treeitem").map((r) => r.textContent ?? "");
}

describe("host page", () => {
  beforeEach(() => {
    // jsdom does no layout; give the tree's scroll box a size so the virtualizer renders rows.
    vi.spyOn(Element.prototype, "clientHeight", "get").mockReturnValue(600);
    vi.spyOn(Element.prototype, "clientWidth", "get").mockReturnValue(800);
  });
  afterEach(() => {
    vi.unstubAllGlobals();
    vi.restoreAllMocks();
  });

  it("fetches the whole catalog once and searches, sorts and expands it locally", async () => {
    const { requests } = stub();
    renderApp("/hosts/host-1");
    expect(await screen.findByRole("heading", { name: "box1" })).toBeInTheDocument();
    expect(screen.getByRole("tab", { name: "Code" })).toHaveAttribute("aria-selected", "true");
    await screen.findByRole("tree");
    const vmlinux = (await screen.findAllByRole("treeitem"))[0];
    expect(vmlinux).toHaveAttribute("aria-level", "1");
    expect(vmlinux).toHaveAttribute("aria-expanded", "true");
    expect(treeNames()).toHaveLength(6);
    const catalogRequest = requests.find((r) => new URL(r.url).pathname.endsWith("/functions"))!;
    expect(new URL(catalogRequest.url).searchParams.get("limit")).toBe("100000");

    const user = userEvent.setup();
    await user.type(screen.getByRole("searchbox", { name: "Search functions" }), "VFS_READ");
    // The search input stays responsive: filtering renders as a deferred update.
    await vi.waitFor(() =>
      expect(screen.getAllByRole("treeitem").map((i) => i.getAttribute("aria-level"))).toEqual(["1", "2", "2"]));
    const item = screen.getByRole("treeitem", { name: /\bvfs_read\b/ });
    expect(within(item).getByRole("link", { name: "vfs_read" })).toHaveAttribute("href", "/hosts/host-1/functions/7");
    expect(item).toHaveTextContent("0xffffffff81234560");
    // One catalog request in all: searching never goes back to the server.
    expect(requests.filter((r) => new URL(r.url).pathname.endsWith("/functions"))).toHaveLength(1);

    await user.clear(screen.getByRole("searchbox", { name: "Search functions" }));
    await user.selectOptions(screen.getByLabelText("Sort by"), "hotness");
    await vi.waitFor(() => expect(screen.getAllByRole("treeitem")).toHaveLength(6));
    const fnRows = screen.getAllByRole("treeitem").filter((r) => r.getAttribute("aria-level") === "2");
    expect(fnRows[0]).toHaveTextContent("ksys_read");
    expect(fnRows[0]).toHaveTextContent("123/s");

    // Expanding a function loads its blocks as level-3 items.
    await user.type(screen.getByRole("searchbox", { name: "Search functions" }), "vfs_read");
    const vfs = await screen.findByRole("treeitem", { name: /\bvfs_read\b/ });
    expect(vfs).toHaveAttribute("aria-expanded", "false");
    await user.click(vfs.querySelector(".twisty")!);
    await screen.findByText("5 samples");
    const blocks = screen.getAllByRole("treeitem").filter((r) => r.getAttribute("aria-level") === "3");
    expect(blocks.map((b) => b.textContent?.trim().slice(0, 18))).toEqual(["0xffffffff81234560", "0xffffffff81234570", "0xffffffff81234578", "0xffffffff81234590"]);
  });

  it("shows the top functions in a labelled table after switching tabs", async () => {
    stub();
    renderApp("/hosts/host-1");
    const user = userEvent.setup();
    await user.click(await screen.findByRole("tab", { name: "Top functions" }));
    const table = await screen.findByRole("table", { name: "Top functions" });
    await within(table).findByText("ksys_read");
    const rows = within(table).getAllByRole("row").slice(1);
    expect(rows[0]).toHaveTextContent("1 ksys_read vmlinux 6.00/s 60.0 %");
    // Whole-word matching on a row's text, as a browser test would do it.
    expect(rows[1].textContent).toMatch(/\bvfs_read\b/);
    expect(within(rows[1]).getByRole("link", { name: "vfs_read" })).toHaveAttribute("href", "/hosts/host-1/functions/7");
    expect(screen.getByRole("button", { name: "10 s" })).toHaveAttribute("aria-pressed", "true");
  });

  it("says so when the host is unknown", async () => {
    setSession({ token: "t", user: null });
    vi.stubGlobal("fetch", routeFetch({ "/api/v1/auth/me": () => json({ id: "u", username: "a", role: "admin" }) }).fetch);
    vi.stubGlobal("WebSocket", undefined);
    renderApp("/hosts/nope");
    expect(await screen.findByRole("heading", { name: "Host not found" })).toBeInTheDocument();
  });
});
