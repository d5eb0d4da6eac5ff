// SPDX-License-Identifier: Apache-2.0
// Test setup: DOM matchers for assertions and a clean DOM and storage between tests. A file whose tests
// need no DOM says `@vitest-environment node` at its top and runs without jsdom, whose setup was most of
// the suite's time (about a second of CPU a file).
import "@testing-library/jest-dom/vitest";
import { afterEach } from "vitest";
import { cleanup, configure } from "@testing-library/react";

// findBy*/waitFor wait until what they look for is there, so the bound only matters when it never comes:
// testing-library's 1 s default failed a render on a loaded machine (two full test runs sharing two
// cores); 20 s stays well inside the 60 s test timeout (vite.config.ts) and costs a passing test nothing.
configure({ asyncUtilTimeout: 20_000 });

afterEach(() => {
  cleanup();
  globalThis.localStorage?.clear();
});
