/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Hex digits and hex strings into bytes and back: the plans, journals and
 * profiles the agent reads carry code and original bytes as hex.
 */
#ifndef HOTPATH_HEX_H
#define HOTPATH_HEX_H

#include <stddef.h>
#include <stdint.h>

/* The value of one hex digit (0-9, a-f, A-F), or -1. */
int hp_hex_digit(char c);

/* Decode the first 2 * n characters of s into n bytes at out: 0, or -1 if
 * one of them is not a hex digit (s must hold at least 2 * n characters). */
int hp_unhex(const char *s, size_t n, uint8_t *out);

/* Write n bytes as 2 * n lowercase hex digits and a NUL at out (2 * n + 1
 * characters). */
void hp_hex(const uint8_t *b, size_t n, char *out);

#endif
