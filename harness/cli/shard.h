/* shard.h: which shard of a case list a run takes: `--shard I/N`, or `--shard auto` read from
 * Slurm's job-array or task variables. Not the partition itself (run takes cases I, I+N, ...).
 */
#ifndef HARNESS_SHARD_H
#define HARNESS_SHARD_H

#include <stddef.h>

/* An environment lookup: getenv, or a test's table. NULL: the variable is not set. */
typedef char *(*shard_env)(const char *name);

/* Parses text into the 1-based shard *i of *n (1 <= *i <= *n). "I/N" is taken as written.
 * "auto" asks Slurm: in a job array, *i = (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN) /
 * SLURM_ARRAY_TASK_STEP + 1 (step 1 when unset) of *n = SLURM_ARRAY_TASK_COUNT; else, in a
 * step of several tasks, *i = SLURM_PROCID + 1 of *n = SLURM_NTASKS. Returns 0, or -1 with a
 * sentence in why (which variable is missing or malformed, or an array whose ids are not
 * MIN, MIN+STEP, ...: its shards would overlap or leave cases out). */
int shard_parse(const char *text, shard_env env, long long *i, long long *n, char *why,
                size_t why_len);

#endif
