/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Growable arrays: an array with a count and a capacity grows through
 * hp_grow, which at least doubles the capacity, so n pushes cost O(n)
 * copying in all (a realloc by one element per push costs O(n^2)).
 */
#ifndef HOTPATH_GROW_H
#define HOTPATH_GROW_H

#include <stddef.h>

/* Make room for at least need elements of elem bytes in the array that
 * *arrp points to, whose capacity is *cap elements: 0 (the array and *cap
 * updated, new room uninitialised), or -1 with errno ENOMEM (nothing
 * changed: the array is still valid and still the caller's to free). */
int hp_grow(void *arrp, size_t *cap, size_t need, size_t elem);

/* hp_grow on an array variable (any element type) and its size_t capacity. */
#define HP_GROW(arr, cap, need) hp_grow(&(arr), &(cap), (need), sizeof(*(arr)))

#endif
