/* worker_test.c: a worker answers line for line; one that dies or was never there is an error
 * with a reason, never a hang or a SIGPIPE. Not the oracle engine's test (engine_test.c).
 */
#include <signal.h>
#include <string.h>

#include "test_util.h"
#include "worker.h"

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  char line[128];
  worker *w;
  char *echo[] = {"/bin/sh", "-c", "echo ready; while read l; do echo \"got $l\"; done", NULL};
  tbe_status s = worker_start(echo, &w, line, sizeof line);
  CHECK(s.code == TBE_OK && !strcmp(line, "ready"), "greeting: %s %s", line, s.message);
  if (s.code == TBE_OK) {
    for (int i = 0; i < 3; i++) {
      s = worker_ask(w, "a b", line, sizeof line);
      CHECK(s.code == TBE_OK && !strcmp(line, "got a b"), "reply %d: '%s'", i, line);
    }
    worker_stop(w);
  }

  char *quits[] = {"/bin/sh", "-c", "echo hello", NULL};
  s = worker_start(quits, &w, line, sizeof line);
  CHECK(s.code == TBE_OK && !strcmp(line, "hello"), "greeting of a quitter");
  if (s.code == TBE_OK) {
    s = worker_ask(w, "x", line, sizeof line);
    /* it may be gone before the request (the write fails) or after (the read finds EOF) */
    CHECK(s.code == TBE_EIO && strstr(s.message, "worker"), "dead worker: %s", s.message);
    s = worker_ask(w, "y", line, sizeof line);
    CHECK(s.code == TBE_EIO, "a dead worker answered");
    worker_stop(w);
  }

  char *silent[] = {"/bin/sh", "-c", "exit 3", NULL};
  s = worker_start(silent, &w, line, sizeof line);
  CHECK(s.code == TBE_EIO && !w, "a worker without a greeting started");

  char *missing[] = {"/nonexistent/worker", NULL};
  s = worker_start(missing, &w, line, sizeof line);
  CHECK(s.code == TBE_EIO && strstr(s.message, "cannot start") && !w, "missing: %s", s.message);
  return TEST_MAIN_RESULT();
}
