// SPDX-License-Identifier: Apache-2.0
// Kernel addresses as text. They exceed 2^53, so a JSON number loses its low bits in JavaScript:
// the console renders every address from the API's hex string and does address arithmetic in
// BigInt. A number is used only as a last resort, and then marked approximate.

/** "0xFFFF…" or "ffff…" → "ffff…" (lowercase, no prefix). */
export function normalizeHex(hex: string): string {
  const h = hex.trim().toLowerCase();
  return h.startsWith("0x") ? h.slice(2) : h;
}

export function isHex(hex: string): boolean {
  return /^[0-9a-f]+$/.test(normalizeHex(hex));
}

/** Display form of an address: "0x" + the API's hex digits, untouched otherwise. */
export function formatAddress(hex: string | null | undefined, fallback?: number | null): string {
  if (hex && isHex(hex)) return `0x${normalizeHex(hex)}`;
  if (typeof fallback === "number" && Number.isFinite(fallback)) {
    const text = `0x${Math.trunc(fallback).toString(16)}`;
    // Beyond 2^53 the low bits are gone; say so rather than show a wrong exact-looking value.
    return Number.isSafeInteger(fallback) ? text : `~${text}`;
  }
  return "unknown address";
}

/** Address + offset, exactly, keeping the input's width (e.g. 16 digits for kernel text). */
export function addOffset(hex: string, offset: number): string {
  const base = BigInt(`0x${normalizeHex(hex)}`);
  const sum = base + BigInt(Math.trunc(offset));
  const width = normalizeHex(hex).length;
  return sum.toString(16).padStart(width, "0");
}

/** "+0x1a": an offset inside a function. */
export function formatOffset(offset: number): string {
  return `+0x${offset.toString(16)}`;
}

/** Orders two hex addresses numerically without converting them to (lossy) numbers. */
export function compareHex(a: string, b: string): number {
  const x = normalizeHex(a).replace(/^0+(?=.)/, "");
  const y = normalizeHex(b).replace(/^0+(?=.)/, "");
  if (x.length !== y.length) return x.length - y.length;
  return x < y ? -1 : x > y ? 1 : 0;
}
