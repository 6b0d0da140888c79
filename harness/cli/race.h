/* race.h: `tbecheck race`, race fuzzing of the GPU backward: cases with many chunk programs per run
 * and many runs, each launched again and again on one GPU session under varying schedules
 * (bwd.grid, bwd.order, bwd.noise, bwd.delay, bwd.short_block, bwd.steal, bwd.hoist), every launch
 * held to the reference's bits; and the reference's outputs of one case, which the GPU tests share.
 * Not `tbecheck fuzz` (one launch per case over the whole edge space, fuzz_campaign.h).
 */
#ifndef HARNESS_RACE_H
#define HARNESS_RACE_H

#include "case.h"
#include "gen.h"
#include "tbe.h"

/* The command: argv[0] is "race"; tool_version and cuda (NULL: built without CUDA) go into its
 * runs row. Returns the exit code (0 no failure, and without a GPU after saying so; 1 failures;
 * 2 bad usage or input; 3 I/O or internal error). */
int race_command(int argc, char **argv, const char *tool_version, const char *cuda);

/* The schedule the cycle gives launch k of a race: blocks of the chunk kernel (0: policy), chunk
 * order, noise, delay in ns, work stealing, the metadata in the forward and the short tier's
 * blocks of adjacent runs (gpu_bwd_config's grid, order, noise, delay, steal, hoist,
 * short_block; 0 where steal is on). Launch 0 is the default schedule; every RACE_CYCLE
 * launches cover each combination once. */
typedef struct {
  int grid, order, noise, delay, steal, hoist, short_block;
} race_schedule;
#define RACE_CYCLE 9240
race_schedule race_variant(int64_t k);

/* Writes into buf the text of drawn case number `index` of the race campaign seeded by `seed`:
 * fused deterministic long runs with many chunk programs each (hot rows, zipf, bwd.chunk 1..32,
 * a low bwd.threshold, several tables, fp32/fp16/bf16 weights with and without stochastic
 * rounding, SGD and row-wise Adagrad, weighted or not). `hot` 0 leaves the hot rows out (the
 * caller's fallback when they need more lookups than the draw has). Returns snprintf's length. */
int race_draw(uint64_t seed, uint64_t index, int hot, char *buf, size_t n);

/* One case with the reference's outputs: the batch (pristine again once this returns), its
 * backward's inputs, the bounds-checked forward output and the backward's updated weights,
 * momentum and psw_grad. */
typedef struct {
  tbe_batch b;
  gen_bwd bwd;          /* bwd.cfg NULL: the case has no optimizer (w, m, psw stay NULL);
                         * else it points at cfg, so r outlives the case it came from */
  ref_bwd_config cfg;
  tbe_layout l;
  tbe_bounds_mode mode;
  tbe_status bounds;    /* the bounds check's outcome: TBE_EBOUNDS (FATAL offender) leaves out,
                         * w, m and psw NULL, since the call stops there */
  void *out, *w;        /* [out_elems] output dtype; [table_offset[num_tables]] weight dtype */
  float *m, *psw;       /* [ref_bwd_rows(b)] (Adagrad) and [N] (weighted), else NULL */
  double ms;            /* the reference's bounds check, forward and backward */
} race_ref;

/* Generates case c and runs the reference on it; r does not refer to c afterwards (r must not
 * be copied: r->bwd.cfg points into it). On failure (generation, TBE_ENOMEM, a
 * reference error other than a FATAL offender) everything is freed and r is zeroed. */
tbe_status race_ref_run(const tbe_case *c, race_ref *r);
void race_ref_free(race_ref *r);

#endif
