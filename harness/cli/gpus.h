/* gpus.h: --gpus all|N and --gpu-ids LIST of run, fuzz and race: one worker tbecheck process per
 * local GPU, merged into one database at the end. Not a run, a fuzz campaign or a race itself
 * (cmd_run.c, fuzz_campaign.c, race.c).
 */
#ifndef HARNESS_GPUS_H
#define HARNESS_GPUS_H

#include <stdint.h>

#include "options.h"
#include "session.h"

/* A campaign spread over the local GPUs that nvidia-smi lists. Worker k of the N picked (k from
 * 0, in the order named) is `tbecheck COMMAND [LIST] ARGS... --db DIR/gpuI.db`, then
 * `--shard k+1/N` when there are cases (LIST: all of them, written to DIR, each worker takes its
 * shard), else `--seed gpus_seed(seed, k, N)` (its own seed stream), and `--campaign ID` when
 * campaign is set or there are no cases (fuzz and race: one derived from the command, ARGS, N,
 * seed and the commit, so a rerun on one commit with the same seed and N is the same campaign,
 * case for case). It runs pinned with CUDA_VISIBLE_DEVICES=I, with TBECHECK_GPU_UUID (its run's
 * runs.gpu_uuid) and, unless set, OMP_NUM_THREADS = the host's cores / N. */
typedef struct {
  const char *command;      /* "run", "fuzz" or "race" */
  const char *gpus;         /* --gpus all|N, or NULL */
  const char *gpu_ids;      /* --gpu-ids I,J,..., or NULL */
  const char *db_path;      /* where the workers' databases are merged */
  const char *campaign;     /* --campaign ID, or NULL */
  const char *const *args;  /* the options every worker gets, NULL-terminated */
  const parsed_case *cases; /* run: the case list (ncases of them, each `repeat` times); NULL:
                             * fuzz and race, which draw their cases from the seed */
  int64_t ncases;
  int repeat;
  uint64_t seed;
  double seconds;           /* fuzz and race: each worker's budget (the progress line's end) */
} gpus_job;

/* Worker k's seed of N: seed * N + k (mod 2^64). Distinct for the N workers of one campaign; N
 * = 1 keeps the seed, so one GPU draws what `fuzz --seed` or `race --seed` alone draws. */
uint64_t gpus_seed(uint64_t seed, int k, int n);

/* The UUID of the GPU that a campaign gave this worker (TBECHECK_GPU_UUID, for runs.gpu_uuid),
 * or NULL outside one. */
const char *gpus_worker_uuid(void);

/* Runs j over the GPUs that j->gpus or j->gpu_ids names, shows one progress line (a pipe: the
 * workers' failures and warnings prefixed `gpu I:`, with the cases each passed for run, a
 * line every 5 s for fuzz and race), merges the workers' databases into j->db_path and prints
 * each GPU's share and the campaign's summary. Exit 2 before anything is written for a GPU this
 * host does not have, a GPU named twice, both options, no nvidia-smi or a database that cannot
 * be written; 1 failures; 3 a worker that died or failed (its finished cases are kept, its run
 * stays incomplete, the reason is printed) or a merge that failed; else 0. When no worker
 * wrote a database (race without a GPU: each says so), a database this call created is
 * removed again. */
int gpus_campaign(const gpus_job *j);

/* run --gpus / --gpu-ids over the n cases of `all` (o->repeat times each): exit 2 with --shard
 * or --inject-fault, which cannot be spread, else as gpus_campaign. */
int run_on_gpus(const cli_options *o, const parsed_case *all, int64_t n);

#endif
