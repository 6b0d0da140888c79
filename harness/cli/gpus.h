/* gpus.h: run --gpus all|N and --gpu-ids LIST: one worker `tbecheck run` per local GPU, each
 * on its shard, merged into one database at the end. Not a run itself (cmd_run.c).
 */
#ifndef HARNESS_GPUS_H
#define HARNESS_GPUS_H

#include "options.h"
#include "session.h"

/* Runs the n cases of `all` (o->repeat times each) as a campaign over the GPUs that o->gpus or
 * o->gpu_ids names: exit 2 for a GPU this host does not have (nvidia-smi lists them) or options
 * that cannot be spread; 1 failures; 3 a worker that died (its finished cases are kept, its run
 * stays incomplete) or a merge that failed; 0 all passed. */
int run_on_gpus(const cli_options *o, const parsed_case *all, int64_t n);

#endif
