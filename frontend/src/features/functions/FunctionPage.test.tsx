// SPDX-License-Identifier: Apache-2.0
import { afterEach, describe, expect, it, vi } from "vitest";
import { fireEvent, screen, within } from "@testing-library/react";
import { renderApp } from "../../test/render";
import { json, routeFetch, sampleDetail } from "../../test/fixtures";
import { setSession } from "../../api/session";

function stub(instructions: () => Response) {
  setSession({ token: "t", user: null });
  vi.stubGlobal(
    "fetch",
    routeFetch({
      "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
      "/api/v1/hosts/h/functions/7": () => json(sampleDetail()),
      "/api/v1/hosts/h/functions/7/samples": () =>
        json({
          function_id: 7,
          window_s: 60,
          from: "2026-01-01T00:00:00Z",
          to: "2026-01-01T00:01:00Z",
          seconds: 60,
          total: 20,
          blocks: [{ offset: 0, samples: 20, samples_per_sec: 2 }],
        }),
      "/api/v1/hosts/h/functions/7/instructions": instructions,
    }).fetch,
  );
  vi.stubGlobal("WebSocket", undefined);
}

describe("function page", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("draws one CFG node per block, coloured by samples, and shows a clicked block's instructions", async () => {
    stub(() =>
      json({
        function_id: 7,
        address: 0,
        instructions: [
          { offset: 0, address: 0, address_hex: "ffffffff81234560", length: 1, bytes: "55", text: "push rbp" },
          { offset: 16, address: 0, address_hex: "ffffffff81234570", length: 1, bytes: "c3", text: "ret" },
        ],
      }),
    );
    renderApp("/hosts/h/functions/7");
    expect(await screen.findByRole("heading", { name: "vfs_read" })).toBeInTheDocument();
    // The layout runs off the page's critical path; the graph appears when it is done.
    const cfg = await screen.findByRole("img", { name: "Control-flow graph" });
    const blocks = within(cfg).getAllByTestId("cfg-block");
    expect(blocks).toHaveLength(4);
    expect(blocks[0]).toHaveTextContent("0xffffffff81234560");
    expect(blocks[0]).toHaveTextContent("size 16");
    // Exit nodes are drawn, but are not blocks.
    expect(cfg).toHaveTextContent("return");
    expect(cfg).toHaveTextContent("rw_verify_area");
    await vi.waitFor(() => expect(blocks[0].querySelector("rect")?.getAttribute("fill")).toMatch(/^rgb/));
    expect(blocks[1].querySelector("rect")?.getAttribute("fill")).toBe("#eef0f3");
    expect(cfg.querySelector('path[data-kind="taken"]')).toHaveAttribute("stroke-dasharray", "6 4");

    fireEvent.click(blocks[0]);
    const panel = screen.getByRole("region", { name: "Instructions" });
    await within(panel).findByText("push rbp");
    expect(panel).toHaveTextContent("0xffffffff81234560");
    expect(within(panel).queryByText("ret")).toBeNull();

    // Keyboard selection works too.
    fireEvent.keyDown(blocks[1], { key: "Enter" });
    await within(panel).findByText("ret");

    const callees = screen.getByRole("region", { name: "Callees" });
    // Links carry the time range along (the default: the last minute).
    expect(within(callees).getByRole("link", { name: "__fsnotify_parent" })).toHaveAttribute(
      "href",
      "/hosts/h/functions/11?from=now-1m&to=now",
    );
    expect(callees).toHaveTextContent("0xffffffffc0001000");
  });

  it('marks a function of an installed group with an "installed copy" badge linking to its plan', async () => {
    setSession({ token: "t", user: null });
    const { fetch, requests } = routeFetch({
      "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
      "/api/v1/hosts/h/functions/7": () => json(sampleDetail()),
      "/api/v1/hosts/h/functions/7/samples": () =>
        json({
          function_id: 7,
          window_s: 60,
          from: "2026-01-01T00:00:00Z",
          to: "2026-01-01T00:01:00Z",
          seconds: 60,
          total: 0,
          blocks: [],
        }),
      "/api/v1/hosts/h/functions/7/instructions": () => json({ function_id: 7, address: 0, instructions: [] }),
      "/api/v1/hosts/h/plans": () =>
        json([
          {
            id: "11111111-2222-3333-4444-555555555555",
            state: "installed",
            root_digest: "0".repeat(64),
            root_name: "ksys_read",
            members: ["ksys_read", "vfs_read"],
            install_by: "op",
          },
          {
            id: "99999999-2222-3333-4444-555555555555",
            state: "installed",
            root_digest: "f".repeat(64),
            root_name: "x",
            members: ["vfs_read"],
            install_by: "op",
          },
        ]),
    });
    vi.stubGlobal("fetch", fetch);
    vi.stubGlobal("WebSocket", undefined);
    renderApp("/hosts/h/functions/7?target=p42-100");
    const badge = await screen.findByRole("link", { name: "installed copy" });
    expect(badge).toHaveAttribute("href", "/hosts/h/plans/11111111-2222-3333-4444-555555555555");
    const asked = requests.map((r) => new URL(r.url)).find((u) => u.pathname === "/api/v1/hosts/h/plans");
    expect(asked?.searchParams.getAll("state")).toEqual(["installed"]);
    expect(asked?.searchParams.get("target")).toBe("p42-100");
  });

  it("shows no badge when no installed group holds the function", async () => {
    stub(() => json({ function_id: 7, address: 0, instructions: [] }));
    renderApp("/hosts/h/functions/7");
    expect(await screen.findByRole("heading", { name: "vfs_read" })).toBeInTheDocument();
    await new Promise((r) => setTimeout(r, 50));
    expect(screen.queryByRole("link", { name: "installed copy" })).toBeNull();
  });

  it("on a process target, says where samples and stacks come from instead of reporting the function missing", async () => {
    setSession({ token: "t", user: null });
    // The sample and stack routes serve the kernel only: asked about a process function they answer 404.
    const notFound = () => json({ detail: "Function not found" }, 404);
    const { fetch, requests } = routeFetch({
      "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
      "/api/v1/hosts/h/functions/7": () => json(sampleDetail()),
      "/api/v1/hosts/h/functions/7/samples": notFound,
      "/api/v1/hosts/h/functions/7/instruction-samples": notFound,
      "/api/v1/hosts/h/functions/7/calls": notFound,
    });
    vi.stubGlobal("fetch", fetch);
    vi.stubGlobal("WebSocket", undefined);
    renderApp("/hosts/h/functions/7?target=p42-100");
    await screen.findByRole("heading", { name: "vfs_read", level: 1 });
    const notes = await screen.findAllByTestId("process-samples-note");
    expect(notes).toHaveLength(2);
    for (const note of notes) {
      expect(note).toHaveTextContent(
        "PC samples and call stacks cover the kernel; measure this process's functions from its Measure page",
      );
      expect(within(note).getByRole("link", { name: "Measure page" })).toHaveAttribute(
        "href",
        "/hosts/h/measure?target=p42-100&fn=7",
      );
      expect(note.closest(".error")).toBeNull();
    }
    expect(
      within(screen.getByRole("region", { name: "Callers and callees" })).getByTestId("process-samples-note"),
    ).toBeInTheDocument();
    await new Promise((r) => setTimeout(r, 50));
    expect(screen.queryByText(/Function not found/)).toBeNull();
    expect(screen.queryByRole("alert")).toBeNull();
    const kernelOnly = requests
      .map((r) => new URL(r.url).pathname)
      .filter((p) => /\/(samples|instruction-samples|calls)$/.test(p));
    expect(kernelOnly).toEqual([]);
  });

  it("shows why instructions are unavailable", async () => {
    stub(() => json({ detail: "Host is offline" }, 503));
    renderApp("/hosts/h/functions/7");
    await screen.findByRole("heading", { name: "vfs_read" });
    fireEvent.click((await screen.findAllByTestId("cfg-block"))[0]);
    expect(await screen.findByRole("alert")).toHaveTextContent("Host is offline");
  });

  it("shows a not-found page for an unknown function", async () => {
    setSession({ token: "t", user: null });
    vi.stubGlobal(
      "fetch",
      routeFetch({
        "/api/v1/auth/me": () => json({ id: "u", username: "admin", role: "admin" }),
        "/api/v1/hosts/h/functions/999": () => json({ detail: "Function not found" }, 404),
      }).fetch,
    );
    vi.stubGlobal("WebSocket", undefined);
    renderApp("/hosts/h/functions/999");
    expect(await screen.findByText("Function not found")).toBeInTheDocument();
    expect(screen.getByRole("link", { name: "Back to the host" })).toHaveAttribute("href", "/hosts/h");
  });
});
