/* test_tmpdir.h: a fresh temporary directory for a unit test, removed when all checks passed
 * (kept for a look otherwise). Not for the CLI tests, which get their work directory from CTest.
 */
#ifndef HARNESS_TEST_TMPDIR_H
#define HARNESS_TEST_TMPDIR_H

#include <stdio.h>
#include <stdlib.h>

/* Creates $TMPDIR/<name>_XXXXXX (or under /tmp) into dir; exits the test if it cannot. */
static void test_tmpdir_make(char *dir, size_t n, const char *name)
{
  const char *base = getenv("TMPDIR");
  snprintf(dir, n, "%s/%s_XXXXXX", base && *base ? base : "/tmp", name);
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    exit(1);
  }
}

/* Removes dir and everything in it, unless a check failed. */
static void test_tmpdir_done(const char *dir, int failures)
{
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (failures)
    fprintf(stderr, "kept %s for a look\n", dir);
  else if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
}

#endif
