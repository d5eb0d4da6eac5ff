// SPDX-License-Identifier: Apache-2.0
// Playwright drives Debian's Chromium (no browser download) against the whole stack, which
// e2e/run.sh starts exactly as `make run` does and describes through HOTPATH_E2E_* variables.
import { defineConfig } from "@playwright/test";

const baseURL = process.env.HOTPATH_E2E_URL ?? "http://127.0.0.1:18080";

export default defineConfig({
  testDir: "./tests",
  timeout: 90_000,
  expect: { timeout: 20_000 },
  fullyParallel: false,
  workers: 1,
  retries: 0,
  reporter: [["list"]],
  use: {
    baseURL,
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
  projects: [
    { name: "setup", testMatch: /auth\.setup\.ts/ },
    {
      name: "console",
      dependencies: ["setup"],
      use: { storageState: "test-results/.auth/admin.json" },
    },
  ],
});
