/* replay.c: the main() of a fuzz target outside the fuzz build: runs LLVMFuzzerTestOneInput
 * once on each file named (a directory: each file in it, in name order). Not libFuzzer: it
 * explores nothing; it keeps the seed corpus and the kept crash inputs passing in every build.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int by_name(const struct dirent **a, const struct dirent **b)
{
  return strcmp((*a)->d_name, (*b)->d_name);
}

static int run_file(const char *path)
{
  size_t n;
  uint8_t *data = fuzz_read_file(path, &n);
  if (!data) {
    fprintf(stderr, "replay: cannot read %s\n", path);
    exit(2);
  }
  LLVMFuzzerTestOneInput(data, n);
  free(data);
  return 1;
}

int main(int argc, char **argv)
{
  int inputs = 0;
  for (int a = 1; a < argc; a++) {
    struct stat st;
    if (stat(argv[a], &st) != 0) {
      fprintf(stderr, "replay: no such file or directory: %s\n", argv[a]);
      return 2;
    }
    if (!S_ISDIR(st.st_mode)) {
      inputs += run_file(argv[a]);
      continue;
    }
    struct dirent **names;
    int k = scandir(argv[a], &names, NULL, by_name);
    for (int i = 0; i < k; i++) {
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", argv[a], names[i]->d_name);
      if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
        inputs += run_file(p);
      free(names[i]);
    }
    free(names);
  }
  if (!inputs) {
    fprintf(stderr, "usage: %s FILE|DIR ...   (at least one input)\n", argv[0]);
    return 2;
  }
  printf("%d inputs ran clean\n", inputs);
  return 0;
}
