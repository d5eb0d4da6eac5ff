// SPDX-License-Identifier: Apache-2.0
/*
 * Hex digits and hex strings into bytes (see hex.h).
 */
#include "base/hex.h"

int hp_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int hp_unhex(const char *s, size_t n, uint8_t *out)
{
	for (size_t i = 0; i < n; i++) {
		int hi = hp_hex_digit(s[2 * i]), lo = hi < 0 ? -1 : hp_hex_digit(s[2 * i + 1]);
		if (lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}
