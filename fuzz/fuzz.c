/* fuzz.c: the input reader and scratch directory that fuzz/'s targets share (fuzz.h).
 * Not a target itself, and not the replay driver (replay.c).
 */
#include "fuzz.h"

#include <dirent.h>
#include <string.h>
#include <unistd.h>

uint8_t fuzz_u8(fuzz_reader *r)
{
  if (!r->n)
    return 0;
  r->n--;
  return *r->p++;
}

uint16_t fuzz_u16(fuzz_reader *r)
{
  uint16_t lo = fuzz_u8(r);
  return (uint16_t)(lo | (uint16_t)fuzz_u8(r) << 8);
}

uint64_t fuzz_u64(fuzz_reader *r)
{
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)fuzz_u8(r) << (8 * i);
  return v;
}

static char scratch[256];

/* Removes the scratch directory and what the targets left in it (one level: they make no
 * subdirectories but the one fuzz_import fills). */
static void remove_tree(const char *dir)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (unlink(p) != 0)
      remove_tree(p);
  }
  if (d)
    closedir(d);
  rmdir(dir);
}

static void remove_scratch(void) { remove_tree(scratch); }

const char *fuzz_dir(void)
{
  if (!scratch[0]) {
    const char *tmp = getenv("TMPDIR"); /* else memory-backed /dev/shm where there is one */
    if (!tmp || !*tmp)
      tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(scratch, sizeof scratch, "%s/tbefuzz.XXXXXX", tmp);
    FUZZ_CHECK(mkdtemp(scratch), "cannot create a scratch directory %s", scratch);
    atexit(remove_scratch);
  }
  return scratch;
}

void fuzz_path(char *buf, size_t n, const char *name)
{
  snprintf(buf, n, "%s/%s", fuzz_dir(), name);
}

void fuzz_write_file(const char *path, const void *data, size_t n)
{
  FILE *f = fopen(path, "wb");
  FUZZ_CHECK(f, "cannot write %s", path);
  FUZZ_CHECK(fwrite(data, 1, n, f) == n && fclose(f) == 0, "cannot write %s", path);
}

uint8_t *fuzz_read_file(const char *path, size_t *n)
{
  FILE *f = fopen(path, "rb");
  *n = 0;
  if (!f)
    return NULL;
  size_t cap = 4096;
  uint8_t *buf = malloc(cap);
  size_t k;
  while (buf && (k = fread(buf + *n, 1, cap - *n, f)) > 0) {
    *n += k;
    if (*n == cap)
      buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  FUZZ_CHECK(buf, "out of memory reading %s", path);
  return buf;
}
