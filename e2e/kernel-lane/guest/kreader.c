// SPDX-License-Identifier: Apache-2.0
/*
 * kreader: the kernel lane's reader of known data (issue 18's read-path
 * cycles). It writes FILE (in the guest's tmpfs) with a generated pattern of
 * BYTES bytes, then reads it with read(2) in a loop, CHUNK bytes at a time
 * from offsets that walk through the file (so reads start and end inside
 * pages), checking every byte it reads against the pattern, until SIGTERM or
 * SIGINT. Then it prints
 *   kreader: reads R, bytes B, short reads S, mismatches M
 * and exits 0 when nothing was wrong (M and S are 0, and every read(2)
 * succeeded), 1 otherwise. The first wrong read is described on stderr as it
 * happens. With STATUS_FILE it also rewrites that file (atomically, by
 * rename) with "reads R mismatches M" every 256 reads, so a check can see the
 * reader is alive and right while it runs.
 *
 *   kreader FILE BYTES CHUNK [STATUS_FILE]
 *
 * Static, like lanework: its only read()s are the ones it checks.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

/* The pattern: every byte a function of its offset, not periodic within a page.
 */
static uint8_t pattern(uint64_t off) {
  uint64_t x = off * 0x9e3779b97f4a7c15ull;
  return (uint8_t)((x >> 56) ^ (off >> 12) ^ off);
}

static void status(const char *path, unsigned long reads, unsigned long bad) {
  char tmp[4200], line[96];
  int n =
      snprintf(line, sizeof(line), "reads %lu mismatches %lu\n", reads, bad);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return;
  if (write(fd, line, (size_t)n) == n)
    rename(tmp, path);
  close(fd);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: kreader FILE BYTES CHUNK [STATUS_FILE]\n");
    return 2;
  }
  const char *path = argv[1], *st = argc > 4 ? argv[4] : NULL;
  uint64_t size = strtoull(argv[2], NULL, 0),
           chunk = strtoull(argv[3], NULL, 0);
  if (size < 1 || size > (256u << 20) || chunk < 1 || chunk > (1u << 20)) {
    fprintf(stderr, "kreader: BYTES 1..256 MiB, CHUNK 1..1 MiB\n");
    return 2;
  }
  uint8_t *buf = malloc(chunk), *w = malloc(65536);
  if (!buf || !w)
    return 1;
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    fprintf(stderr, "kreader: %s: %s\n", path, strerror(errno));
    return 1;
  }
  for (uint64_t off = 0; off < size;) {
    size_t n = size - off < 65536 ? (size_t)(size - off) : 65536;
    for (size_t i = 0; i < n; i++)
      w[i] = pattern(off + i);
    if (write(fd, w, n) != (ssize_t)n) {
      fprintf(stderr, "kreader: writing %s: %s\n", path, strerror(errno));
      return 1;
    }
    off += n;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  printf("kreader pid %d reading %s (%llu bytes, %llu at a time)\n",
         (int)getpid(), path, (unsigned long long)size,
         (unsigned long long)chunk);
  fflush(stdout);

  unsigned long reads = 0, shorts = 0, bad = 0, errors = 0;
  unsigned long long bytes = 0;
  /* Start offsets step by a prime, so reads cross page boundaries at every
   * phase. */
  uint64_t pos = 0, step = 4093;
  while (!stop) {
    if (lseek(fd, (off_t)pos, SEEK_SET) < 0) {
      errors++;
      break;
    }
    ssize_t got = read(fd, buf, chunk);
    if (got < 0) {
      if (errno == EINTR)
        continue;
      if (!errors++)
        fprintf(stderr, "kreader: read at %llu: %s\n", (unsigned long long)pos,
                strerror(errno));
      continue;
    }
    uint64_t want = size - pos < chunk ? size - pos : chunk;
    reads++;
    bytes += (unsigned long long)got;
    if ((uint64_t)got != want && !shorts++)
      fprintf(stderr,
              "kreader: read %lu at %llu returned %zd bytes, not %llu\n", reads,
              (unsigned long long)pos, got, (unsigned long long)want);
    for (ssize_t i = 0; i < got; i++)
      if (buf[i] != pattern(pos + (uint64_t)i)) {
        if (!bad)
          fprintf(stderr,
                  "kreader: read %lu at %llu: byte %zd is 0x%02x, not 0x%02x\n",
                  reads, (unsigned long long)pos, i, buf[i],
                  pattern(pos + (uint64_t)i));
        bad++;
        break;
      }
    if (st && reads % 256 == 0)
      status(st, reads, bad);
    pos = (pos + step) % size;
  }
  if (st)
    status(st, reads, bad);
  printf("kreader: reads %lu, bytes %llu, short reads %lu, mismatches %lu, "
         "errors %lu\n",
         reads, bytes, shorts, bad, errors);
  return bad || shorts || errors || !reads ? 1 : 0;
}
