// SPDX-License-Identifier: Apache-2.0
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen } from "@testing-library/react";
import { useState } from "react";
import { MemoryRouter, Route, Routes, useParams } from "react-router-dom";
import { FlameGraph } from "./FlameGraph";
import { layoutFlame, type FlameFrame } from "./flameModel";

const frames: FlameFrame[] = [
  { name: "entry_SYSCALL_64", module: "vmlinux", kind: "kernel", function_id: 1 },
  { name: "ksys_read", module: "vmlinux", kind: "kernel", function_id: 2 },
  { name: "vfs_read", module: "vmlinux", kind: "kernel", function_id: 3 },
];
// root(100) → entry(100) → ksys_read(60) → vfs_read(60)
const layout = layoutFlame({
  frames,
  frame: [-1, 0, 1, 2],
  parent: [-1, 0, 1, 2],
  total: [100, 100, 60, 60],
  self: [0, 40, 0, 60],
});

function Graph() {
  const [focus, setFocus] = useState(0);
  return (
    <FlameGraph
      layout={layout}
      frames={frames}
      orientation="icicle"
      focus={focus}
      onFocus={setFocus}
      search={null}
      functionHref={(id) => `/fn/${id}`}
      seconds={1}
      label="Flame graph of a test"
    />
  );
}

function Fn() {
  return <h1>function {useParams().id}</h1>;
}

describe("FlameGraph", () => {
  beforeEach(() => {
    // jsdom lays nothing out and has no canvas: a 1000 px wide graph, drawn nowhere.
    vi.spyOn(HTMLElement.prototype, "clientWidth", "get").mockReturnValue(1000);
    vi.spyOn(HTMLCanvasElement.prototype, "getContext").mockReturnValue(null);
  });
  afterEach(() => {
    cleanup();
    vi.restoreAllMocks();
  });

  it("opens, on a double click, the frame its first click chose, whatever lies under the second", () => {
    render(
      <MemoryRouter>
        <Routes>
          <Route path="/" element={<Graph />} />
          <Route path="/fn/:id" element={<Fn />} />
        </Routes>
      </MemoryRouter>,
    );
    const frame = (name: string) => screen.getAllByTestId("flame-frame").find((b) => b.dataset.name === name)!;
    // The first click zooms into ksys_read, so the second click of the double click lands on another
    // frame (in Chromium, the one the zoom moved under the pointer): the browser's click with detail 2.
    fireEvent.click(frame("ksys_read"), { detail: 1 });
    fireEvent.click(frame("entry_SYSCALL_64"), { detail: 2 });
    fireEvent.doubleClick(frame("entry_SYSCALL_64"));
    expect(screen.getByRole("heading", { level: 1 }).textContent).toBe("function 2");
  });
});
