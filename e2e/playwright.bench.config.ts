// SPDX-License-Identifier: Apache-2.0
// Browser benchmarks (bench/cfg_layout with BROWSER=1, bench/catalog_load): the same Chromium and
// sign-in as the tests, against the stack e2e/run.sh starts; they print figures rather than assert.
import { defineConfig } from "@playwright/test";
import base from "./playwright.config";

export default defineConfig({
  ...base,
  testDir: ".",
  timeout: 300_000,
  projects: [
    { name: "setup", testMatch: /tests\/auth\.setup\.ts/ },
    {
      name: "bench",
      testMatch: /bench\/.*\.spec\.ts/,
      dependencies: ["setup"],
      use: { storageState: "test-results/.auth/admin.json" },
    },
  ],
});
