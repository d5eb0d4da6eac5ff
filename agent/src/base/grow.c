// SPDX-License-Identifier: Apache-2.0
/* Growable arrays (grow.h): the capacity doubles, from 8 elements. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"

int hp_grow(void *arrp, size_t *cap, size_t need, size_t elem)
{
	size_t c = *cap ? *cap : 8;
	void *old, *v;

	if (need <= *cap)
		return 0;
	while (c < need) {
		if (c > SIZE_MAX / 2) {
			c = need;
			break;
		}
		c *= 2;
	}
	if (!elem || c > SIZE_MAX / elem) {
		errno = ENOMEM;
		return -1;
	}
	memcpy(&old, arrp, sizeof(old));
	if (!(v = realloc(old, c * elem)))
		return -1;
	memcpy(arrp, &v, sizeof(v));
	*cap = c;
	return 0;
}
