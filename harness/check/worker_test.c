/* worker_test.c: a worker answers line for line; one that dies or was never there is an error
 * with a reason, never a hang or a SIGPIPE. Not the oracle engine's test (engine_test.c).
 */
#include <signal.h>
#include <string.h>
#include <time.h>

#include "test_util.h"
#include "worker.h"

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  char line[128];
  worker *w;
  char *echo[] = {"/bin/sh", "-c", "echo ready; while read l; do echo \"got $l\"; done", NULL};
  tbe_status s = worker_start(echo, 0, &w, line, sizeof line);
  CHECK(s.code == TBE_OK && !strcmp(line, "ready"), "greeting: %s %s", line, s.message);
  if (s.code == TBE_OK) {
    for (int i = 0; i < 3; i++) {
      s = worker_ask(w, "a b", line, sizeof line);
      CHECK(s.code == TBE_OK && !strcmp(line, "got a b"), "reply %d: '%s'", i, line);
    }
    worker_stop(w);
  }

  char *quits[] = {"/bin/sh", "-c", "echo hello", NULL};
  s = worker_start(quits, 0, &w, line, sizeof line);
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
  s = worker_start(silent, 0, &w, line, sizeof line);
  CHECK(s.code == TBE_EIO && !w, "a worker without a greeting started");

  char *missing[] = {"/nonexistent/worker", NULL};
  s = worker_start(missing, 0, &w, line, sizeof line);
  CHECK(s.code == TBE_EIO && strstr(s.message, "cannot start") && !w, "missing: %s", s.message);

  /* a worker that never replies is killed at its time limit, not waited on forever; so is one
   * that never greets, and one that stops mid-line */
  char *hangs[] = {"/bin/sh", "-c", "echo ready; read l; exec sleep 1000", NULL};
  s = worker_start(hangs, 1, &w, line, sizeof line);
  CHECK(s.code == TBE_OK && !strcmp(line, "ready"), "greeting of a hanger: %s", s.message);
  if (s.code == TBE_OK) {
    time_t t0 = time(NULL);
    s = worker_ask(w, "x", line, sizeof line);
    CHECK(s.code == TBE_EIO && strstr(s.message, "within 1 s: killed") && time(NULL) - t0 < 5,
          "hung worker: %s after %lld s", s.message, (long long)(time(NULL) - t0));
    CHECK(worker_dead(w) != NULL, "a timed-out worker is not dead");
    worker_stop(w);
  }
  char *mute[] = {"/bin/sh", "-c", "exec sleep 1000", NULL};
  s = worker_start(mute, 1, &w, line, sizeof line);
  CHECK(s.code == TBE_EIO && !w && strstr(s.message, "killed"), "mute: %s", s.message);
  char *half[] = {"/bin/sh", "-c", "echo ready; read l; printf half; exec sleep 1000", NULL};
  s = worker_start(half, 1, &w, line, sizeof line);
  if (s.code == TBE_OK) {
    s = worker_ask(w, "x", line, sizeof line);
    CHECK(s.code == TBE_EIO && strstr(s.message, "killed"), "half a line: %s", s.message);
    worker_stop(w);
  }
  /* lines that arrive together are returned one at a time */
  char *two[] = {"/bin/sh", "-c", "echo ready; read l; echo one; echo two; read l", NULL};
  s = worker_start(two, 5, &w, line, sizeof line);
  if (s.code == TBE_OK) {
    s = worker_ask(w, "x", line, sizeof line);
    CHECK(s.code == TBE_OK && !strcmp(line, "one"), "first of two: %s", line);
    s = worker_ask(w, "y", line, sizeof line);
    CHECK(s.code == TBE_OK && !strcmp(line, "two"), "second of two: %s", line);
    worker_stop(w);
  }
  return TEST_MAIN_RESULT();
}
