// SPDX-License-Identifier: Apache-2.0
import { describe, expect, it } from "vitest";
import { render, screen, within } from "@testing-library/react";
import { InstructionsPanel, instructionCounts, spacedBytes } from "./InstructionsPanel";
import { block } from "../../test/fixtures";

const ins = [
  { offset: 0, address: 0, address_hex: "ffffffff81234560", length: 1, bytes: "55", text: "push rbp", probe: false },
  {
    offset: 1,
    address: 0,
    address_hex: "ffffffff81234561",
    length: 3,
    bytes: "4889e5",
    text: "mov rbp, rsp",
    probe: false,
  },
  { offset: 4, address: 0, address_hex: "ffffffff81234564", length: 1, bytes: "c3", text: "ret", probe: false },
];

describe("instructions panel", () => {
  it("asks for a block until one is selected", () => {
    render(<InstructionsPanel block={null} blockHex={null} instructions={undefined} loading={false} error={null} />);
    expect(screen.getByRole("region", { name: "Instructions" })).toHaveTextContent("Select a block");
  });

  it("lists only the selected block's instructions with exact addresses and spaced bytes", () => {
    render(
      <InstructionsPanel
        block={block(0, 4, [], "ffffffff81234560")}
        blockHex="ffffffff81234560"
        instructions={ins}
        loading={false}
        error={null}
      />,
    );
    const panel = screen.getByRole("region", { name: "Instructions" });
    expect(panel).toHaveTextContent("Block 0xffffffff81234560 · size 4");
    const rows = within(panel).getAllByRole("row").slice(1);
    expect(rows.map((r) => r.textContent)).toEqual([
      "0xffffffff81234560 55 push rbp",
      "0xffffffff81234561 48 89 e5 mov rbp, rsp",
    ]);
  });

  it("marks the instruction a running measurement probes, with the program's own bytes, and says so", () => {
    const probed = ins.map((i) => ({ ...i, probe: i.offset === 0 }));
    render(
      <InstructionsPanel
        block={block(0, 4, [], "ffffffff81234560")}
        blockHex="ffffffff81234560"
        instructions={probed}
        loading={false}
        error={null}
      />,
    );
    const panel = screen.getByRole("region", { name: "Instructions" });
    const rows = within(panel).getAllByRole("row").slice(1);
    expect(rows.map((r) => r.textContent)).toEqual([
      "0xffffffff81234560 55 push rbp probe",
      "0xffffffff81234561 48 89 e5 mov rbp, rsp",
    ]);
    expect(rows[0]).toHaveClass("probed");
    expect(within(panel).getByTestId("probe-note")).toHaveTextContent("probe sits on 1 instruction(s)");
  });

  it("marks no probe where none sits", () => {
    render(
      <InstructionsPanel
        block={block(0, 4, [], "ffffffff81234560")}
        blockHex="ffffffff81234560"
        instructions={ins}
        loading={false}
        error={null}
      />,
    );
    const panel = screen.getByRole("region", { name: "Instructions" });
    expect(within(panel).queryByText("probe")).toBeNull();
    expect(within(panel).queryByTestId("probe-note")).toBeNull();
  });

  it("shows loading, then the server's reason when the host cannot be read", () => {
    const b = block(0, 4, []);
    const { rerender } = render(
      <InstructionsPanel block={b} blockHex={b.address_hex} instructions={undefined} loading error={null} />,
    );
    expect(screen.getByText("Loading instructions…")).toBeInTheDocument();
    rerender(
      <InstructionsPanel
        block={b}
        blockHex={b.address_hex}
        instructions={undefined}
        loading={false}
        error="Host is offline"
      />,
    );
    expect(screen.getByRole("alert")).toHaveTextContent("Instructions unavailable: Host is offline");
  });

  it("spaces packed byte strings only", () => {
    expect(spacedBytes("4889e5")).toBe("48 89 e5");
    expect(spacedBytes("48 89 e5")).toBe("48 89 e5");
  });
});

describe("instruction samples", () => {
  it("shows each instruction's samples and marks the function's hottest", () => {
    const samples = instructionCounts([
      { offset: 1, samples: 30 },
      { offset: 4, samples: 30 },
      { offset: 0, samples: 5 },
    ]);
    expect(samples.hottest).toBe(1); // a tie goes to the lower offset
    expect(samples.total).toBe(65);
    render(
      <InstructionsPanel
        block={block(0, 5, [], "ffffffff81234560")}
        blockHex="ffffffff81234560"
        instructions={ins}
        loading={false}
        error={null}
        samples={samples}
      />,
    );
    const panel = screen.getByRole("region", { name: "Instructions" });
    const rows = within(panel).getAllByRole("row").slice(1);
    expect(rows.map((r) => r.textContent)).toEqual([
      "5 0xffffffff81234560 55 push rbp",
      "hottest30 0xffffffff81234561 48 89 e5 mov rbp, rsp",
      "30 0xffffffff81234564 c3 ret",
    ]);
    expect(rows[1]).toHaveAttribute("aria-current", "true");
    expect(screen.getByTestId("hottest-instruction")).toHaveTextContent("Hottest instruction: +0x1 (30 of 65 samples)");
  });

  it("offers to show the hottest instruction when it lies in another block", () => {
    let asked = 0;
    render(
      <InstructionsPanel
        block={block(4, 1, [], "ffffffff81234564")}
        blockHex="ffffffff81234564"
        instructions={ins}
        loading={false}
        error={null}
        samples={instructionCounts([{ offset: 1, samples: 3 }])}
        onGoHottest={() => {
          asked++;
        }}
      />,
    );
    screen.getByRole("button", { name: "show it" }).click();
    expect(asked).toBe(1);
  });
});
