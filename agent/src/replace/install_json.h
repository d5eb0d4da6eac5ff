/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What an install, a revert and the journals say, as the JSON objects
 * `hotpathd install|revert|installed --json` print and the daemon's
 * InstallResult.detail_json carries (install_json.c): one writer for both.
 * Formats: docs/agent-cli.md ("hotpathd install, revert, installed").
 */
#ifndef HOTPATH_REPLACE_INSTALL_JSON_H
#define HOTPATH_REPLACE_INSTALL_JSON_H

#include <stdio.h>

#include "replace/install.h"

/* {"status": "installed", ...} for plan installed into pid. */
void hp_install_json_installed(FILE *fp, const struct hp_iplan *plan, int pid, const struct hp_install_result *res);
/* {"status": "refused", "root", "error"}; root may be NULL. */
void hp_install_json_refused(FILE *fp, const char *root, const char *error);
/* A revert's outcome: r is what hp_revert returned (error when r < 0). */
void hp_revert_json(FILE *fp, int r, int pid, const struct hp_install_result *res, const char *error);
/* The status word of a revert: reverted, reverted_heap_kept, nothing_installed or failed. */
const char *hp_revert_status(int r, const struct hp_install_result *res);
/* {"state_dir", "installed": [...]}: the journals (only pid's when pid > 0). */
void hp_installed_json(FILE *fp, const char *state_dir, const struct hp_installed *ins, size_t n, int pid);

#endif
