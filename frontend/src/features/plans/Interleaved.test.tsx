// SPDX-License-Identifier: Apache-2.0
import { describe, expect, it } from "vitest";
import { render, screen } from "@testing-library/react";
import type { PlanInterleaved } from "../../api/types";
import { Interleaved } from "./Interleaved";

const reverted: PlanInterleaved = {
  id: "c1",
  command_id: "k1",
  requested_by: "admin",
  guard: true,
  pairs: 2,
  window_seconds: 1,
  state: "done",
  progress: null,
  message: null,
  error: null,
  windows: [],
  pair_shares: [
    { pair: 0, original: 0.2, installed: 0.22, used: true },
    { pair: 1, original: 0.2, installed: 0.23, used: true },
  ],
  summary: {
    share_original: 0.2,
    share_installed: 0.225,
    change: 0.125,
    interval: [0.02, 0.23],
    confidence: 0.95,
    verdict: "slower",
    pairs_used: 2,
  },
  guard_action: "reverted",
  guard_reason: "guard: the plan's code took +12.5% of the samples (95% interval +2.0% .. +23.0%); reverted",
  created_at: "2026-11-26T17:00:00Z",
  finished_at: "2026-11-26T17:00:05Z",
};

describe("the interleaved before/after", () => {
  it("draws a dot per window, lists the pairs, and says what the guard did and why", () => {
    render(<Interleaved c={reverted} />);
    const chart = screen.getByRole("img", { name: /Share of samples in the plan's code per pair/ });
    expect(chart.querySelectorAll("circle.dot.original")).toHaveLength(2);
    expect(chart.querySelectorAll("circle.dot.installed")).toHaveLength(2);
    expect(chart.querySelectorAll("line.link.up")).toHaveLength(2);
    expect(screen.getByTestId("interleaved-pairs").querySelectorAll("tbody tr")).toHaveLength(2);
    expect(screen.getByTestId("interleaved-verdict")).toHaveTextContent(
      /^Slower: the plan's code took \+12\.5% \(95% interval \+2\.0% \.\. \+23\.0%\)/,
    );
    expect(screen.getByTestId("guard-reason")).toHaveTextContent(/; reverted$/);
    expect(screen.queryByRole("progressbar")).toBeNull();
  });

  it("shows its progress while it runs, with no chart yet", () => {
    const running = {
      ...reverted,
      state: "running" as const,
      progress: 0.25,
      message: "pair 1/2: installed",
      pair_shares: [],
      summary: null,
      guard_action: null,
      guard_reason: null,
    };
    render(<Interleaved c={running} />);
    expect(screen.getByRole("progressbar", { name: "Comparison progress" })).toHaveAttribute("value", "0.25");
    expect(screen.getByTestId("interleaved-verdict")).toHaveTextContent(
      "Comparing with the original code: pair 1/2: installed",
    );
    expect(screen.queryByRole("img")).toBeNull();
  });
});
