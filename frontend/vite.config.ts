// SPDX-License-Identifier: Apache-2.0
// Vite builds the console into dist/ (served by the backend at / with an SPA fallback); in
// development it proxies the REST API and the live-update WebSocket to a local backend. The same
// file configures vitest, which runs the unit tests in jsdom (those that need no DOM in node).
import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";
import react from "@vitejs/plugin-react";

const backend = process.env.HOTPATH_BACKEND ?? "http://127.0.0.1:8080";

export default defineConfig({
  plugins: [react()],
  server: {
    proxy: {
      "/api": { target: backend, changeOrigin: true, ws: true },
    },
  },
  build: {
    outDir: "dist",
    sourcemap: false,
    chunkSizeWarningLimit: 700,
  },
  test: {
    environment: "jsdom",
    setupFiles: ["src/test/setup.ts"],
    include: ["src/**/*.test.{ts,tsx}"],
    css: false,
    // One test file per core. Vitest's default keeps a core for its main process (cores - 1 workers: one
    // on CI's 2 cores), which does little here: most of a file's time is its worker building jsdom. With
    // 2 workers on 2 quiet cores the suite took 85 s instead of 143 s for the same CPU (session 19).
    maxWorkers: availableParallelism(),
    // A case's time limit guards against a hang, not against a slow machine: the page tests type and
    // click through whole screens in jsdom, which took 0.5-1.5 s alone and 5.1 s once with both cores
    // taken by the rest of `make test` (vitest's default limit, 5 s, failed it). 60 s keeps a real hang
    // visible without making the outcome depend on the machine's load.
    testTimeout: 60_000,
  },
});
