/* runinfo_test.c: the NVIDIA driver version is read from both forms of the driver's /proc line,
 * and a run records a commit only as 40 hex digits. Not a test of the host it runs on.
 */
#include <string.h>

#include "runinfo.h"
#include "test_util.h"

int main(void)
{
  static const struct {
    const char *line, *want;
  } cases[] = {
    {"NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U16)",
     "580.159.04"},
    {"NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024", "550.54.14"},
    {"garbled", ""},
    {"", ""},
  };
  char buf[64];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    runinfo_driver_version(cases[i].line, buf, sizeof buf);
    CHECK(!strcmp(buf, cases[i].want), "'%s' gave '%s', wanted '%s'", cases[i].line, buf,
          cases[i].want);
  }
  runinfo r;
  runinfo_collect(&r);
  size_t n = strlen(r.git_commit);
  CHECK(n == 0 || (n == 40 && strspn(r.git_commit, "0123456789abcdef") == 40),
        "commit '%s'", r.git_commit);
  CHECK(n ? r.dirty == 0 || r.dirty == 1 : r.dirty == -1, "dirty %d with commit '%s'", r.dirty,
        r.git_commit);
  CHECK(r.host[0] != '\0', "no host name");
  return TEST_MAIN_RESULT();
}
