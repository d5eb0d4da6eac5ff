/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The catalog: the code model of one module as the backend stores it, named
 * by a content digest so that every host running the same kernel build
 * computes the same name and a fleet stores the piece once. This file computes
 * those digests and cuts a module into CatalogChunk messages small enough for
 * gRPC's default 4 MiB message limit.
 */
#ifndef HOTPATH_CATALOG_H
#define HOTPATH_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/*
 * The build key a piece's digest starts with: for the kernel's modules the
 * kernel build id (or the release when there is none); for a process's or a
 * file's module "elf:" and the module's own GNU build id (so one binary
 * hashes alike in every process and on every host).
 */
void hp_catalog_build_key(const struct hp_model *m, const struct hp_module *mod, char *out, size_t outlen);

/*
 * Hex SHA-256 over the canonical serialization of module mod_idx of m: the
 * build key (hp_catalog_build_key), the module name and
 * every function's name, offset from the module base, size, blocks with their
 * successors, direct calls and indirect call sites. Addresses that point
 * elsewhere are written as symbol+offset so the digest does not depend on
 * where the code was loaded (an address outside every function: relative to
 * the core kernel, or for a process module to the module's base). Returns 0
 * and writes 64 hex digits + NUL.
 */
int hp_catalog_digest(const struct hp_model *m, size_t mod_idx, char out[65]);
/* Compute and store hp_module.digest for every module. */
int hp_catalog_digest_all(struct hp_model *m);

/* Number of basic blocks of a module (sum over its functions). */
size_t hp_catalog_block_count(const struct hp_module *mod);

/* Walks one module chunk by chunk. */
struct hp_catalog_iter {
	const struct hp_model *m;
	size_t mod_idx;
	size_t next_fn;
	uint32_t seq;
	bool done;
};

#define HP_CATALOG_CHUNK_FUNCS 2000
#define HP_CATALOG_CHUNK_BYTES (2u << 20)

void hp_catalog_iter_init(struct hp_catalog_iter *it, const struct hp_model *m, size_t mod_idx);
/*
 * Pack the next chunk as a complete AgentMessage{catalog_chunk} of at most
 * max_funcs functions and (unless one function alone is larger) max_bytes.
 * Returns 1 with a malloc'd *buf of *len bytes and the chunk's function count
 * in *nfuncs (and *last), 0 when the module is finished, or a negative errno.
 */
int hp_catalog_next_chunk(struct hp_catalog_iter *it, size_t max_funcs, size_t max_bytes, uint8_t **buf, size_t *len,
			  uint32_t *nfuncs, bool *last);

#endif
