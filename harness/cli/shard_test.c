/* shard_test.c: --shard I/N and --shard auto from Slurm's array and task variables, and the
 * refusals (no Slurm, a missing or malformed variable, an array with gaps). Not the split.
 */
#include <string.h>

#include "shard.h"
#include "test_util.h"

static const char *const *vars; /* NAME, VALUE, ..., NULL: the environment of one check */

static char *lookup(const char *name) /* getenv's type: its strings are not to be written */
{
  for (const char *const *v = vars; *v; v += 2)
    if (!strcmp(v[0], name))
      return (char *)v[1];
  return NULL;
}

/* shard_parse(text) under env: want_i/want_n, or a refusal (want_n 0) whose reason holds need */
static void expect(const char *text, const char *const *env, long long want_i, long long want_n,
                   const char *need)
{
  long long i = -1, n = -1;
  char why[256] = "";
  vars = env;
  int r = shard_parse(text, lookup, &i, &n, why, sizeof why);
  if (want_n) {
    CHECK(r == 0 && i == want_i && n == want_n, "%s: %lld/%lld (r %d: %s), expected %lld/%lld",
          text, i, n, r, why, want_i, want_n);
  } else {
    CHECK(r == -1 && strstr(why, need), "%s: r %d, why '%s', expected a refusal naming '%s'",
          text, r, why, need);
  }
}

int main(void)
{
  static const char *const none[] = {NULL};
  expect("2/4", none, 2, 4, NULL);
  expect("0/4", none, 0, 0, "bad value '0/4' for --shard");
  expect("5/4", none, 0, 0, "1 <= I <= N");
  expect("2/4x", none, 0, 0, "1 <= I <= N");
  expect("auto", none, 0, 0, "not in a Slurm job array");

  /* --array=0-3: ids 0..3 are shards 1..4; --array=5-8 likewise (MIN is subtracted) */
  static const char *const a0[] = {"SLURM_ARRAY_TASK_ID", "0", "SLURM_ARRAY_TASK_MIN", "0",
                                   "SLURM_ARRAY_TASK_COUNT", "4", "SLURM_PROCID", "0", NULL};
  expect("auto", a0, 1, 4, NULL);
  static const char *const a8[] = {"SLURM_ARRAY_TASK_ID", "8", "SLURM_ARRAY_TASK_MIN", "5",
                                   "SLURM_ARRAY_TASK_COUNT", "4", NULL};
  expect("auto", a8, 4, 4, NULL);
  /* --array=1-9:4 (ids 1, 5, 9): 9 is shard 3 of 3 */
  static const char *const st[] = {"SLURM_ARRAY_TASK_ID", "9", "SLURM_ARRAY_TASK_MIN", "1",
                                   "SLURM_ARRAY_TASK_COUNT", "3", "SLURM_ARRAY_TASK_STEP", "4",
                                   NULL};
  expect("auto", st, 3, 3, NULL);
  /* --array=1,2,7: 7 - 1 + 1 = 7 > 3 tasks: its shards would leave cases out */
  static const char *const gap[] = {"SLURM_ARRAY_TASK_ID", "7", "SLURM_ARRAY_TASK_MIN", "1",
                                    "SLURM_ARRAY_TASK_COUNT", "3", NULL};
  expect("auto", gap, 0, 0, "gaps");
  static const char *const nomin[] = {"SLURM_ARRAY_TASK_ID", "2", "SLURM_ARRAY_TASK_COUNT", "4",
                                      NULL};
  expect("auto", nomin, 0, 0, "SLURM_ARRAY_TASK_MIN is (not set)");
  static const char *const bad[] = {"SLURM_ARRAY_TASK_ID", "2x", "SLURM_ARRAY_TASK_MIN", "0",
                                    "SLURM_ARRAY_TASK_COUNT", "4", NULL};
  expect("auto", bad, 0, 0, "SLURM_ARRAY_TASK_ID is 2x");

  /* srun -n 3: SLURM_PROCID 0..2 are shards 1..3 */
  static const char *const t2[] = {"SLURM_PROCID", "2", "SLURM_NTASKS", "3", NULL};
  expect("auto", t2, 3, 3, NULL);
  static const char *const t3[] = {"SLURM_PROCID", "3", "SLURM_NTASKS", "3", NULL};
  expect("auto", t3, 0, 0, "0 <= SLURM_PROCID < SLURM_NTASKS");
  static const char *const t0[] = {"SLURM_PROCID", "0", NULL};
  expect("auto", t0, 0, 0, "SLURM_NTASKS (not set)");
  return TEST_MAIN_RESULT();
}
