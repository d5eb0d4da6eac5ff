// SPDX-License-Identifier: Apache-2.0
// @vitest-environment node
import { describe, expect, it } from "vitest";
import { addOffset, compareHex, formatAddress, normalizeHex } from "./address";

describe("kernel addresses", () => {
  it("renders the API's hex string exactly, even where the JSON number has lost bits", () => {
    const hex = "ffffffff81234567";
    const lossy = Number(BigInt(`0x${hex}`));
    // The number cannot hold the low bits: this is why the console uses the string.
    expect(lossy.toString(16)).not.toBe(hex);
    expect(formatAddress(hex, lossy)).toBe("0xffffffff81234567");
  });

  it("normalizes prefixes and case", () => {
    expect(normalizeHex("0xFFFFFFFF81000000")).toBe("ffffffff81000000");
    expect(formatAddress("0XABC")).toBe("0xabc");
  });

  it("marks a number-only address above 2^53 as approximate", () => {
    expect(formatAddress(null, 18446744071580000000)).toMatch(/^~0x/);
    expect(formatAddress(undefined, 4096)).toBe("0x1000");
    expect(formatAddress("not hex")).toBe("unknown address");
  });

  it("adds an offset exactly in BigInt, keeping the width", () => {
    expect(addOffset("ffffffff81234567", 0x19)).toBe("ffffffff81234580");
    expect(addOffset("0000000000001000", 1)).toBe("0000000000001001");
  });

  it("orders hex addresses numerically without going through numbers", () => {
    // Both round to the same double, but the strings differ.
    expect(Number(BigInt("0xffffffff81234561"))).toBe(Number(BigInt("0xffffffff81234562")));
    expect(compareHex("ffffffff81234561", "ffffffff81234562")).toBeLessThan(0);
    expect(compareHex("fff", "1000")).toBeLessThan(0);
    expect(compareHex("0x00ff", "ff")).toBe(0);
  });
});
