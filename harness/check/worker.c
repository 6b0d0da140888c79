/* worker.c: a child process behind two pipes, one request line in, one reply line out, each
 * within a time limit. Not a general process library: no stderr capture (the child inherits ours).
 */
#define _GNU_SOURCE /* pipe2 */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

struct worker {
  pid_t pid;
  FILE *to;       /* the child's stdin */
  int from;       /* the child's stdout (read through in[], so a wait can be bounded) */
  char in[4096];  /* read from it, not yet returned */
  size_t in_len;
  int timeout_s;  /* the longest wait for a line; 0: none */
  char dead[200]; /* why it is dead, or "" */
  int reaped;     /* its exit status has been collected */
};

/* Collects the exit status of a worker that closed its output and says how it ended. */
static void worker_reap(worker *w)
{
  int st = 0;
  pid_t r;
  while ((r = waitpid(w->pid, &st, 0)) < 0 && errno == EINTR)
    ;
  w->reaped = r == w->pid;
  if (!w->reaped)
    snprintf(w->dead, sizeof w->dead, "worker %d closed its output (it exited or crashed)",
             (int)w->pid);
  else if (WIFSIGNALED(st))
    snprintf(w->dead, sizeof w->dead, "worker %d was killed by signal %d (%s)", (int)w->pid,
             WTERMSIG(st), strsignal(WTERMSIG(st)));
  else
    snprintf(w->dead, sizeof w->dead, "worker %d exited with status %d without replying",
             (int)w->pid, WEXITSTATUS(st));
}

static int64_t now_ms(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Reads one line into buf without its '\n'; marks the worker dead on EOF, on error, or when no
 * whole line came within w->timeout_s (then it is killed: a hung worker must not hang us). */
static tbe_status worker_read_line(worker *w, char *buf, size_t n)
{
  const int64_t deadline = w->timeout_s ? now_ms() + (int64_t)w->timeout_s * 1000 : 0;
  size_t len = 0;
  for (;;) {
    char *nl = memchr(w->in, '\n', w->in_len);
    size_t take = nl ? (size_t)(nl - w->in) : w->in_len;
    if (len + take >= n) {
      snprintf(w->dead, sizeof w->dead, "worker %d replied with a line longer than %zu bytes",
               (int)w->pid, n - 1);
      return tbe_error(TBE_EIO, "worker", -1, "%s", w->dead);
    }
    memcpy(buf + len, w->in, take);
    len += take;
    if (nl) {
      buf[len] = '\0';
      w->in_len -= take + 1;
      memmove(w->in, nl + 1, w->in_len);
      return tbe_ok();
    }
    w->in_len = 0;
    const int64_t left = deadline ? deadline - now_ms() : -1;
    struct pollfd p = {w->from, POLLIN, 0};
    int r = deadline && left <= 0 ? 0 : poll(&p, 1, deadline ? (int)left : -1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r == 0) {
      kill(w->pid, SIGKILL);
      worker_reap(w);
      snprintf(w->dead, sizeof w->dead, "worker %d gave no whole line within %d s: killed",
               (int)w->pid, w->timeout_s);
      return tbe_error(TBE_EIO, "worker", -1, "%s", w->dead);
    }
    ssize_t got = r < 0 ? -1 : read(w->from, w->in, sizeof w->in);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      worker_reap(w);
      return tbe_error(TBE_EIO, "worker", -1, "%s", w->dead);
    }
    w->in_len = (size_t)got;
  }
}

tbe_status worker_start(char *const argv[], int timeout_s, worker **out, char *greeting,
                        size_t n)
{
  *out = NULL;
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0)
    return tbe_error(TBE_EIO, "worker", -1, "pipe: %s", strerror(errno));
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    close(in_pipe[0]);
    close(in_pipe[1]);
    return tbe_error(TBE_EIO, "worker", -1, "pipe: %s", strerror(err));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDOUT_FILENO);
  pid_t pid;
  int err = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in_pipe[0]);
  close(out_pipe[1]);
  worker *w = calloc(1, sizeof *w);
  if (err != 0 || !w) {
    close(in_pipe[1]);
    close(out_pipe[0]);
    free(w);
    if (err == 0) {
      waitpid(pid, NULL, 0);
      return tbe_error(TBE_ENOMEM, "worker", -1, "out of memory");
    }
    return tbe_error(TBE_EIO, "worker", -1, "cannot start %s: %s", argv[0], strerror(err));
  }
  w->pid = pid;
  w->timeout_s = timeout_s;
  w->from = out_pipe[0];
  w->to = fdopen(in_pipe[1], "w");
  if (!w->to) {
    close(in_pipe[1]);
    worker_stop(w);
    return tbe_error(TBE_ENOMEM, "worker", -1, "fdopen failed");
  }
  tbe_status s = worker_read_line(w, greeting, n);
  if (s.code != TBE_OK) {
    worker_stop(w);
    return s;
  }
  *out = w;
  return tbe_ok();
}

tbe_status worker_ask(worker *w, const char *request, char *reply, size_t n)
{
  if (w->dead[0])
    return tbe_error(TBE_EIO, "worker", -1, "%s", w->dead);
  if (fprintf(w->to, "%s\n", request) < 0 || fflush(w->to) != 0) {
    snprintf(w->dead, sizeof w->dead, "cannot write to worker %d: %s", (int)w->pid,
             strerror(errno));
    return tbe_error(TBE_EIO, "worker", -1, "%s", w->dead);
  }
  return worker_read_line(w, reply, n);
}

int worker_pid(const worker *w) { return w ? (int)w->pid : 0; }

const char *worker_dead(const worker *w) { return w && w->dead[0] ? w->dead : NULL; }

void worker_stop(worker *w)
{
  if (!w)
    return;
  if (w->to)
    fclose(w->to);
  close(w->from);
  if (w->dead[0] && !w->reaped) /* it may be stuck mid-reply: do not wait on it forever */
    kill(w->pid, SIGKILL);
  while (!w->reaped && waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
    ;
  free(w);
}
