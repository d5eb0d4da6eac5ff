/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's config file: `label.NAME = VALUE` lines become the labels
 * Hello reports; what the backend would refuse (a NUL or control character,
 * an oversized value, 33 labels, a bad or repeated name, an unknown key) stops
 * the agent at start with the file and line. A real file is read from disk,
 * and a missing default file is -ENOENT for the caller to accept.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "daemon/agent_config.h"

static struct hp_agent_config cfg;
static char err[512];

static int parse(const char *text, size_t len)
{
	err[0] = '\0';
	return hp_agent_config_parse(text, len, "test.conf", &cfg, err, sizeof(err));
}

static void labels_are_read_with_comments_and_spaces(void)
{
	const char *text =
		"# the host's place\n"
		"label.role = db\n"
		"\n"
		"  label.region=eu-west  \r\n"
		"label.rack =\tr12 # not a comment\n"
		"label.empty =\n";
	REQUIRE(parse(text, strlen(text)) == 0, "parse failed: %s", err);
	REQUIRE(cfg.nlabels == 4, "%zu labels", cfg.nlabels);
	EXPECT(!strcmp(cfg.labels[0].key, "role") && !strcmp(cfg.labels[0].value, "db"), "role");
	EXPECT(!strcmp(cfg.labels[1].key, "region") && !strcmp(cfg.labels[1].value, "eu-west"), "region");
	EXPECT(!strcmp(cfg.labels[2].value, "r12 # not a comment"), "rack: '%s'", cfg.labels[2].value);
	EXPECT(!strcmp(cfg.labels[3].key, "empty") && cfg.labels[3].value[0] == '\0', "empty");
}

static void expect_refused(const char *text, size_t len, const char *reason)
{
	EXPECT(parse(text, len) == -EINVAL, "accepted: %.40s", text);
	EXPECT(strstr(err, reason) != NULL, "reason '%s' not in '%s'", reason, err);
}

static void bad_labels_are_refused_with_the_line(void)
{
	const char nul[] = "label.role = d\0b\n";
	expect_refused(nul, sizeof(nul) - 1, "test.conf:1: label role: the value holds a NUL or control character");
	expect_refused("\nlabel.role = \x1b[31mred\n", 22, "test.conf:2: label role: the value holds a NUL");
	expect_refused("label.role db\n", 14, "test.conf:1: expected key = value");
	expect_refused("lable.role = db\n", 16, "unknown key lable.role");
	expect_refused("label. = db\n", 12, "unknown key label.");
	expect_refused("label.ro le = db\n", 17, "a label name may hold only");
	expect_refused("label.role = db\nlabel.role = web\n", 33, "test.conf:2: label role is given twice");

	char *big = malloc(10 * 1024 * 1024 + 32);
	REQUIRE(big, "out of memory");
	int n = snprintf(big, 32, "label.role = ");
	memset(big + n, 'x', 10 * 1024 * 1024);
	expect_refused(big, (size_t)n + 10 * 1024 * 1024, "the value is 10485760 bytes long (at most 255)");
	free(big);

	char many[33 * 16 + 1], *p = many;
	for (int i = 0; i < 33; i++)
		p += sprintf(p, "label.k%d = v\n", i);
	expect_refused(many, strlen(many), "test.conf:33: more than 32 labels");
	char longkey[128];
	snprintf(longkey, sizeof(longkey), "label.%064d = x\n", 0);
	expect_refused(longkey, strlen(longkey), "a label name must be 1 to 63 characters");
}

static void a_file_is_read_and_a_missing_one_is_enoent(void)
{
	char path[] = "/tmp/hotpath-test-config-XXXXXX";
	int fd = mkstemp(path);
	REQUIRE(fd >= 0, "mkstemp: %s", strerror(errno));
	const char *text = "label.role = web\n";
	REQUIRE(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write");
	close(fd);
	REQUIRE(hp_agent_config_load(path, &cfg, err, sizeof(err)) == 0, "load: %s", err);
	EXPECT(cfg.nlabels == 1 && !strcmp(cfg.labels[0].value, "web"), "labels from the file");
	unlink(path);
	EXPECT(hp_agent_config_load(path, &cfg, err, sizeof(err)) == -ENOENT, "a missing file is not -ENOENT");
}

int main(void)
{
	RUN(labels_are_read_with_comments_and_spaces);
	RUN(bad_labels_are_refused_with_the_line);
	RUN(a_file_is_read_and_a_missing_one_is_enoent);
	TEST_EXIT();
}
