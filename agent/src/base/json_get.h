/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading numbers from parsed JSON (jansson): addresses and sizes travel as
 * JSON integers or as "0x..." strings (integers past 2^63 cannot be JSON
 * integers for every reader).
 */
#ifndef HOTPATH_JSON_GET_H
#define HOTPATH_JSON_GET_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* v as a 64-bit unsigned number: a JSON integer, or a string strtoull reads
 * whole (decimal, or hex with 0x) without overflow. false otherwise. */
bool hp_json_u64(const json_t *v, uint64_t *out);

#endif
