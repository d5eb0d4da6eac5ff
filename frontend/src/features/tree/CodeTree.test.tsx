// SPDX-License-Identifier: Apache-2.0
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { renderApp } from "../../test/render";
import { fnSummary, host, json, routeFetch, sampleDetail } from "../../test/fixtures";
import { setSession } from "../../api/session";

// Two content-addressed pieces: vmlinux at ffffffff81000000 and ext4 at ffffffffc0000000 (offsets are
// relative to each module's base on this host).
const modules = [
  {
    name: "vmlinux",
    digest: "aa".repeat(32),
    base_address: 0,
    base_address_hex: "ffffffff81000000",
    function_count: 4,
    block_count: 9,
    complete: true,
  },
  {
    name: "ext4",
    digest: "bb".repeat(32),
    base_address: 0,
    base_address_hex: "ffffffffc0000000",
    function_count: 1,
    block_count: 3,
    complete: true,
  },
];
const pieces: Record<string, unknown> = {
  [modules[0].digest]: {
    digest: modules[0].digest,
    module: "vmlinux",
    function_count: 4,
    ids: [9, 7, 8, 11],
    names: ["ksys_read", "vfs_read", "vfs_readv", "__SCT__preempt_schedule"],
    offsets: [0x230000, 0x234560, 0x300000, 0x400000],
    sizes: [64, 64, 64, 8],
    block_counts: [3, 4, 3, 1],
    undecodable: [],
  },
  [modules[1].digest]: {
    digest: modules[1].digest,
    module: "ext4",
    function_count: 1,
    ids: [10],
    names: ["ext4_file_read_iter"],
    offsets: [0x10000],
    sizes: [64],
    block_counts: [3],
    undecodable: [],
  },
};

function stub() {
  setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
  const routes = routeFetch({
    "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
    "/api/v1/hosts/host-1": () => json(host()),
    "/api/v1/hosts/host-1/modules": () => json(modules),
    [`/api/v1/catalogs/${modules[0].digest}`]: () => json(pieces[modules[0].digest]),
    [`/api/v1/catalogs/${modules[1].digest}`]: () => json(pieces[modules[1].digest]),
    "/api/v1/hosts/host-1/hotness": () => json({ window_s: 10, items: [{ function_id: 9, samples_per_sec: 123 }] }),
    "/api/v1/hosts/host-1/timeline": () =>
      json({ from: "2026-01-01T00:00:00Z", to: "2026-01-01T00:01:00Z", seconds: 60, step_s: 1, points: [] }),
    "/api/v1/hosts/host-1/functions/7": () => json(sampleDetail()),
    "/api/v1/hosts/host-1/functions/9": () =>
      json({ ...sampleDetail(), function: fnSummary({ id: 9, name: "ksys_read", block_count: 3 }) }),
    "/api/v1/hosts/host-1/functions/7/samples": () =>
      json({ function_id: 7, window_s: 10, total: 5, blocks: [{ offset: 0, samples: 5, samples_per_sec: 0.5 }] }),
    "/api/v1/hosts/host-1/top-functions": () =>
      json({
        window_s: 10,
        from: "2026-01-01T00:00:00Z",
        to: "2026-01-01T00:00:10Z",
        seconds: 10,
        total_samples: 100,
        user_samples: 0,
        kernel_samples: 100,
        idle_samples: 0,
        unmapped_samples: 0,
        lost_samples: 0,
        functions: 2,
        items: [
          {
            function_id: 9,
            name: "ksys_read",
            module: "vmlinux",
            address: 0,
            address_hex: "ffffffff81230000",
            samples: 60,
            samples_per_sec: 6,
            share: 0.6,
            idle: false,
          },
          {
            function_id: 7,
            name: "vfs_read",
            module: "vmlinux",
            address: 0,
            address_hex: "ffffffff81234560",
            samples: 40,
            samples_per_sec: 4,
            share: 0.4,
            idle: false,
          },
        ],
      }),
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

  it("fetches each catalog piece once and searches, sorts and expands it locally", async () => {
    const { requests } = stub();
    renderApp("/hosts/host-1");
    expect(await screen.findByRole("heading", { name: "box1" })).toBeInTheDocument();
    expect(screen.getByRole("tab", { name: "Code" })).toHaveAttribute("aria-selected", "true");
    await screen.findByRole("tree");
    const vmlinux = (await screen.findAllByRole("treeitem"))[0];
    expect(vmlinux).toHaveAttribute("aria-level", "1");
    expect(vmlinux).toHaveAttribute("aria-expanded", "true");
    // vmlinux, its three functions and the group of static-call trampolines; ext4 and its function.
    expect(treeNames()).toHaveLength(7);
    expect(screen.getByRole("treeitem", { name: /static-call trampolines/ })).toHaveAttribute("aria-expanded", "false");
    const catalogRequests = () => requests.filter((r) => new URL(r.url).pathname.startsWith("/api/v1/catalogs/"));
    expect(catalogRequests()).toHaveLength(2);

    const user = userEvent.setup();
    await user.type(screen.getByRole("searchbox", { name: "Search functions" }), "VFS_READ");
    // The search input stays responsive: filtering renders as a deferred update.
    await vi.waitFor(() =>
      expect(screen.getAllByRole("treeitem").map((i) => i.getAttribute("aria-level"))).toEqual(["1", "2", "2"]),
    );
    const item = screen.getByRole("treeitem", { name: /\bvfs_read\b/ });
    expect(within(item).getByRole("link", { name: "vfs_read" })).toHaveAttribute(
      "href",
      "/hosts/host-1/functions/7?from=now-1m&to=now",
    );
    expect(item).toHaveTextContent("0xffffffff81234560");
    // One request per piece in all: searching never goes back to the server.
    expect(catalogRequests()).toHaveLength(2);

    // Globs, regular expressions and addresses search too.
    const search = screen.getByRole("searchbox", { name: "Search functions" });
    await user.clear(search);
    await user.type(search, "vfs_read*");
    await vi.waitFor(() => expect(treeNames().filter((t) => /vfs_read/.test(t))).toHaveLength(2));
    await user.clear(search);
    await user.type(search, "/^k.*_read$/");
    await vi.waitFor(() =>
      expect(screen.getAllByRole("treeitem").map((i) => i.getAttribute("aria-level"))).toEqual(["1", "2"]),
    );
    expect(screen.getByRole("treeitem", { name: /ksys_read/ })).toBeInTheDocument();
    await user.clear(search);
    await user.type(search, "0xffffffff81234570");
    await vi.waitFor(() => expect(screen.getAllByRole("treeitem")).toHaveLength(2));
    expect(screen.getByRole("treeitem", { name: /\bvfs_read\b/ })).toBeInTheDocument();

    // Sorted by hotness (the default), hottest first.
    await user.clear(search);
    await user.selectOptions(screen.getByLabelText("Sort by"), "name");
    await user.selectOptions(screen.getByLabelText("Sort by"), "hotness");
    await vi.waitFor(() => expect(screen.getAllByRole("treeitem")).toHaveLength(7));
    const fnRows = screen.getAllByRole("treeitem").filter((r) => r.getAttribute("aria-level") === "2");
    expect(fnRows[0]).toHaveTextContent("ksys_read");
    expect(fnRows[0]).toHaveTextContent("123/s");
    // Hot only: just the function with samples in the range.
    await user.click(screen.getByRole("checkbox", { name: /hot only/ }));
    await vi.waitFor(() => expect(screen.getAllByRole("treeitem")).toHaveLength(2));
    await user.click(screen.getByRole("checkbox", { name: /hot only/ }));

    // Expanding a function loads its blocks as level-3 items.
    await user.type(screen.getByRole("searchbox", { name: "Search functions" }), "vfs_read");
    const vfs = await screen.findByRole("treeitem", { name: /\bvfs_read\b/ });
    expect(vfs).toHaveAttribute("aria-expanded", "false");
    await user.click(vfs.querySelector(".twisty")!);
    await screen.findByText("5 samples");
    const blocks = screen.getAllByRole("treeitem").filter((r) => r.getAttribute("aria-level") === "3");
    expect(blocks.map((b) => b.textContent?.trim().slice(0, 18))).toEqual([
      "0xffffffff81234560",
      "0xffffffff81234570",
      "0xffffffff81234578",
      "0xffffffff81234590",
    ]);
  });

  it("ticks functions for measurement by mouse and keyboard, keeps them in the URL and opens the measure page with them picked", async () => {
    stub();
    renderApp("/hosts/host-1");
    const user = userEvent.setup();
    await screen.findByRole("tree");
    await user.click(await screen.findByRole("checkbox", { name: "Select vfs_read for measurement" }));
    expect(screen.getByRole("region", { name: "Selected functions" })).toHaveTextContent("1 selected");
    // Keyboard: the tree's first function (hottest first) is ksys_read; Space ticks the active row.
    screen.getByRole("tree").focus();
    await user.keyboard("{ArrowDown} ");
    expect(screen.getByRole("checkbox", { name: "Select ksys_read for measurement" })).toBeChecked();
    expect(screen.getByRole("region", { name: "Selected functions" })).toHaveTextContent("2 selected");
    // Clear empties the selection and hides the bar.
    await user.click(screen.getByRole("button", { name: "Clear" }));
    expect(screen.queryByRole("region", { name: "Selected functions" })).toBeNull();
    expect(screen.getByRole("checkbox", { name: "Select vfs_read for measurement" })).not.toBeChecked();
    await user.click(screen.getByRole("checkbox", { name: "Select vfs_read for measurement" }));
    await user.click(screen.getByRole("checkbox", { name: "Select ksys_read for measurement" }));
    await user.click(screen.getByRole("button", { name: "Measure selected" }));
    expect(await screen.findByRole("heading", { name: "Measure the kernel" })).toBeInTheDocument();
    const picked = await screen.findByRole("list", { name: "Selected resources" });
    await vi.waitFor(() =>
      expect(
        within(picked)
          .getAllByRole("listitem")
          .map((li) => li.textContent?.split("and its")[0]),
      ).toEqual(["vfs_read", "ksys_read"]),
    );
    expect(within(picked).getByRole("checkbox", { name: "Blocks of vfs_read" })).toBeChecked();
  });

  it("shows the top functions in a labelled table after switching tabs", async () => {
    stub();
    renderApp("/hosts/host-1");
    const user = userEvent.setup();
    await user.click(await screen.findByRole("tab", { name: "Top functions" }));
    const table = await screen.findByRole("table", { name: "Top functions" });
    await within(table).findByText("ksys_read");
    const rows = within(table).getAllByRole("row").slice(1);
    // Self samples, then inclusive ones (none: this range has no call stacks), rate and share.
    expect(rows[0]).toHaveTextContent("1 ksys_read vmlinux 60 – 6.00/s 60.0 %");
    // Whole-word matching on a row's text, as a browser test would do it.
    expect(rows[1].textContent).toMatch(/\bvfs_read\b/);
    expect(within(rows[1]).getByRole("link", { name: "vfs_read" })).toHaveAttribute(
      "href",
      "/hosts/host-1/functions/7?from=now-1m&to=now",
    );
    // The range of every view: the last minute unless the URL says otherwise; the tab is in the URL.
    expect(screen.getByRole("button", { name: "1 min" })).toHaveAttribute("aria-pressed", "true");
    expect(screen.getByTestId("top-totals")).toHaveTextContent("100 samples in the last 1 min");
  });

  it("says so when the host is unknown", async () => {
    setSession({ token: "t", user: null });
    vi.stubGlobal(
      "fetch",
      routeFetch({ "/api/v1/auth/me": () => json({ id: "u", username: "a", role: "admin" }) }).fetch,
    );
    vi.stubGlobal("WebSocket", undefined);
    renderApp("/hosts/nope");
    expect(await screen.findByRole("heading", { name: "Host not found" })).toBeInTheDocument();
  });
});
