// SPDX-License-Identifier: Apache-2.0
import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen } from "@testing-library/react";
import { FrameSearch } from "./FlameView";

afterEach(cleanup);

describe("FrameSearch (the flame graph's and the differential flame graph's search and orientation)", () => {
  it("reports typed queries and orientation clicks, and shows the matches with their share", () => {
    const onQuery = vi.fn();
    const onIcicle = vi.fn();
    render(
      <FrameSearch
        query="vfs"
        onQuery={onQuery}
        found={{ matches: new Uint8Array(0), count: 3, samples: 25, share: 0.25 }}
        matchesTestId="flame-matches"
        icicle={false}
        onIcicle={onIcicle}
      />,
    );
    const box = screen.getByRole("searchbox", { name: "Search frames" });
    expect(box).toHaveProperty("value", "vfs");
    fireEvent.change(box, { target: { value: "vfs_read" } });
    expect(onQuery).toHaveBeenCalledWith("vfs_read");
    expect(screen.getByTestId("flame-matches").textContent).toMatch(/^3 frames match, .+ of samples$/);
    expect(screen.getByRole("button", { name: "Flame" }).getAttribute("aria-pressed")).toBe("true");
    fireEvent.click(screen.getByRole("button", { name: "Icicle" }));
    expect(onIcicle).toHaveBeenCalledWith(true);
  });

  it("shows no matches line without a search, and no test id unless asked", () => {
    const { container } = render(<FrameSearch query="" onQuery={() => {}} found={null} icicle onIcicle={() => {}} />);
    expect(container.textContent).not.toMatch(/frames match/);
    expect(container.querySelector("[data-testid]")).toBeNull();
    expect(screen.getByRole("button", { name: "Icicle" }).getAttribute("aria-pressed")).toBe("true");
  });
});
