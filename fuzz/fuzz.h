/* fuzz.h: what the libFuzzer targets of fuzz/ share: the entry point, an invariant check that
 * names what broke, a reader that decodes values from the input, and a scratch directory.
 * Not a test framework: a target returns 0 or aborts, and libFuzzer keeps the input that did.
 */
#ifndef FUZZ_FUZZ_H
#define FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The one entry point of every target (libFuzzer's, or replay.c's main outside the fuzz build). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts, naming the broken invariant, when cond is false: a finding, kept by libFuzzer. */
#define FUZZ_CHECK(cond, ...)                                                                   \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      fprintf(stderr, "%s:%d: invariant broken: ", __FILE__, __LINE__);                         \
      fprintf(stderr, __VA_ARGS__);                                                             \
      fputc('\n', stderr);                                                                      \
      abort();                                                                                  \
    }                                                                                           \
  } while (0)

/* Bytes of the input consumed front to back; past the end every read gives 0. */
typedef struct {
  const uint8_t *p;
  size_t n;
} fuzz_reader;

uint8_t fuzz_u8(fuzz_reader *r);
uint16_t fuzz_u16(fuzz_reader *r);
uint64_t fuzz_u64(fuzz_reader *r);

/* A directory of this process for the files a target writes (removed at exit), and
 * path = dir/name in buf. */
const char *fuzz_dir(void);
void fuzz_path(char *buf, size_t n, const char *name);

/* Writes n bytes to path (aborts if it cannot: the scratch directory is ours); reads a whole
 * file into a malloc'd buffer (NULL if it is absent). */
void fuzz_write_file(const char *path, const void *data, size_t n);
uint8_t *fuzz_read_file(const char *path, size_t *n);

#endif
