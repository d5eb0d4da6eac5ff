// SPDX-License-Identifier: Apache-2.0
// The kernel lane's browser check (console.spec.ts), run by checks.py while the lane's guest is a
// host of the lane's backend. Same browser setup as the e2e suite: Debian's Chromium, no download.
import { defineConfig } from "@playwright/test";

export default defineConfig({
  testDir: ".",
  testMatch: /console\.spec\.ts/,
  outputDir: process.env.LANE_PLAYWRIGHT_OUTPUT ?? "/tmp/hotpath-lane-playwright",
  timeout: 120_000,
  expect: { timeout: 30_000 },
  workers: 1,
  retries: 0,
  reporter: [["list"]],
  use: {
    baseURL: process.env.HOTPATH_E2E_URL,
    // A failed test keeps its trace (actions, DOM snapshots, network) and a screenshot of the end; the
    // trace's screencast is left out: recording it cost Chromium about a third of its CPU (views and
    // function specs, two alternating pairs: 17 and 16 s against 11 and 11 s, session 19).
    trace: { mode: "retain-on-failure", screenshots: false },
    screenshot: "only-on-failure",
    launchOptions: {
      executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
    },
  },
});
