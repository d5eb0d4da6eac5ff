/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's config file (`hotpathd run --config FILE`, by default
 * /etc/hotpath/hotpathd.conf when it exists): `key = value` lines, `#`
 * comments and blank lines. The one key family today is `label.NAME = VALUE`,
 * the host's labels (role, region, rack...) reported in Hello; the rules are
 * the backend's (at most 32 labels, NAME of 1-63 letters, digits, '.', '_',
 * '-' or '/', VALUE of at most 255 bytes without control characters, each
 * NAME once), so a bad file is refused at start with its line, not by the
 * backend later. An unknown key is refused too (a typo is not ignored).
 */
#ifndef HOTPATH_AGENT_CONFIG_H
#define HOTPATH_AGENT_CONFIG_H

#include <stddef.h>

#define HP_MAX_LABELS      32
#define HP_MAX_LABEL_KEY   63
#define HP_MAX_LABEL_VALUE 255

struct hp_label {
	char key[HP_MAX_LABEL_KEY + 1];
	char value[HP_MAX_LABEL_VALUE + 1];
};

struct hp_agent_config {
	struct hp_label labels[HP_MAX_LABELS];
	size_t nlabels;
};

/* Parse the config text `buf` (`len` bytes; `name` names it in errors) into
 * `cfg`: 0, or -EINVAL with the reason ("FILE:LINE: ...") in `err`. */
int hp_agent_config_parse(const char *buf, size_t len, const char *name, struct hp_agent_config *cfg, char *err,
			  size_t errlen);

/* Read and parse the file at `path`: 0; -ENOENT when it does not exist (the
 * caller decides whether that matters); another negative errno with the
 * reason in `err`. Files above 64 KiB are refused. */
int hp_agent_config_load(const char *path, struct hp_agent_config *cfg, char *err, size_t errlen);

#endif
