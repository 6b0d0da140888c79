/* progress_test.c: the progress line says done/total, failures, rate and ETA as documented,
 * and never divides by zero. Not a terminal test (cli_test.py runs one under a pty).
 */
#include <string.h>

#include "progress.h"
#include "test_util.h"

int main(void)
{
  progress p;
  char buf[128];
  progress_start(&p, 120, 5000.0);
  progress_format(&p, 5000.0, buf, sizeof buf);
  CHECK(!strcmp(buf, "[  0/120] 0 failed, - cases/s, ETA -"), "start: '%s'", buf);
  for (int i = 0; i < 30; i++)
    progress_step(&p, i % 15 == 0);
  progress_format(&p, 7000.0, buf, sizeof buf);
  CHECK(!strcmp(buf, "[ 30/120] 2 failed, 15.0 cases/s, ETA 0:06"), "after 2 s: '%s'", buf);
  progress_format(&p, 5000.0, buf, sizeof buf);
  CHECK(strstr(buf, "ETA -") != NULL, "no elapsed time must not divide by zero: '%s'", buf);
  progress_start(&p, 10000, 0.0);
  progress_step(&p, 0);
  progress_format(&p, 1000.0, buf, sizeof buf);
  CHECK(!strcmp(buf, "[    1/10000] 0 failed, 1.0 cases/s, ETA 166:39"), "long ETA: '%s'", buf);
  return TEST_MAIN_RESULT();
}
