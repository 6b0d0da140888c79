/* shard.c: `--shard I/N` and `--shard auto` (Slurm's variables) into a 1-based shard I of N.
 * Not the partition of the case list, which run does (cases I, I+N, I+2N, ...).
 */
#include "shard.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The integer variable name as *v (>= lo); 1: missing (*v untouched), -1: malformed. */
static int env_int(shard_env env, const char *name, long long lo, long long *v)
{
  const char *s = env(name);
  if (!s)
    return 1;
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno || end == s || *end || x < lo)
    return -1;
  *v = x;
  return 0;
}

static int say(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int say(char *why, size_t len, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
  return -1;
}

static const char *shown(shard_env env, const char *name)
{
  const char *s = env(name);
  return s ? s : "(not set)";
}

/* Slurm's job array: the task's index among MIN, MIN+STEP, ..., of COUNT tasks. */
static int from_array(shard_env env, long long *i, long long *n, char *why, size_t len)
{
  static const char *const need[] = {"SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN",
                                     "SLURM_ARRAY_TASK_COUNT"};
  long long v[3], step = 1;
  for (int k = 0; k < 3; k++) {
    int r = env_int(env, need[k], k == 2 ? 1 : 0, &v[k]);
    if (r)
      return say(why, len, "--shard auto: %s is %s in a job array", need[k], shown(env, need[k]));
  }
  if (env_int(env, "SLURM_ARRAY_TASK_STEP", 1, &step) < 0)
    return say(why, len, "--shard auto: SLURM_ARRAY_TASK_STEP is %s",
               shown(env, "SLURM_ARRAY_TASK_STEP"));
  long long off = v[0] - v[1];
  if (off < 0 || off % step || off / step >= v[2])
    return say(why, len,
               "--shard auto: task %lld is not one of %lld, %lld+%lld, ... (%lld tasks): the "
               "shards of an array with gaps in its ids would not cover every case once",
               v[0], v[1], v[1], step, v[2]);
  *i = off / step + 1;
  *n = v[2];
  return 0;
}

int shard_parse(const char *text, shard_env env, long long *i, long long *n, char *why,
                size_t why_len)
{
  if (strcmp(text, "auto")) {
    char extra;
    if (sscanf(text, "%lld/%lld%c", i, n, &extra) != 2 || *n < 1 || *i < 1 || *i > *n)
      return say(why, why_len, "bad value '%s' for --shard: expected I/N with 1 <= I <= N, or auto",
                 text);
    return 0;
  }
  if (env("SLURM_ARRAY_TASK_ID"))
    return from_array(env, i, n, why, why_len);
  long long id = 0, tasks = 0;
  int r = env_int(env, "SLURM_PROCID", 0, &id), t = env_int(env, "SLURM_NTASKS", 1, &tasks);
  if (r > 0 && t > 0)
    return say(why, why_len, "--shard auto: not in a Slurm job array or task (neither "
                             "SLURM_ARRAY_TASK_ID nor SLURM_PROCID is set)");
  if (r || t || id >= tasks)
    return say(why, why_len, "--shard auto: SLURM_PROCID %s of SLURM_NTASKS %s: expected "
               "0 <= SLURM_PROCID < SLURM_NTASKS", shown(env, "SLURM_PROCID"),
               shown(env, "SLURM_NTASKS"));
  *i = id + 1;
  *n = tasks;
  return 0;
}
