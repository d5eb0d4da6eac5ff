// SPDX-License-Identifier: Apache-2.0
// Test setup: DOM matchers for assertions and a clean DOM and storage between tests.
import "@testing-library/jest-dom/vitest";
import { afterEach } from "vitest";
import { cleanup } from "@testing-library/react";

afterEach(() => {
  cleanup();
  localStorage.clear();
});
