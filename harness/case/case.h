/* case.h: the case language: one line of key=value tokens that names a TBE batch, its parse,
 * canonical print, and deterministic generation into a tbe_batch. Not the CLI (tbecheck.c).
 *
 * Invariant: for every tbe_case c that case_parse accepted, case_format(c) is canonical (keys in
 * a fixed order, defaults omitted) and case_parse(case_format(c)) yields an equal case; the
 * canonical text is the case's identity. case_generate is a pure function of the case: the same
 * text gives the same bytes on every machine and for any thread count.
 */
#ifndef HARNESS_CASE_H
#define HARNESS_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "backward.h"
#include "run_config.h"
#include "tbe.h"

typedef struct tbe_case tbe_case; /* defined in case.c; fields reached through the calls below */

/* Parses one case. Text after '#' is a comment. On error returns TBE_EINVAL with field = the
 * offending key and a message saying what is wrong; *out is NULL then. */
tbe_status case_parse(const char *text, tbe_case **out);
void case_free(tbe_case *c);

/* Writes the canonical text into buf (like snprintf: returns the length it needs). */
int case_format(const tbe_case *c, char *buf, size_t n);

/* 1 if a and b are the same case (every field equal), else 0. Two parsed cases are equal exactly
 * when their canonical texts are. */
int case_equal(const tbe_case *a, const tbe_case *b);

/* The case's bounds mode and seed. */
tbe_bounds_mode case_bounds(const tbe_case *c);
uint64_t case_seed(const tbe_case *c);

/* The knobs of a case that choose how engines run, not what the batch holds: the GPU forward's
 * configuration and the GPU backward's (zero values mean "the default policy"; bwd.width sets
 * both widths of gpu_bwd), and the backward's numerics. */
typedef struct {
  gpu_fwd_config fwd;     /* fwd.bags, fwd.width, fwd.small, fused_bounds */
  gpu_bwd_config gpu_bwd; /* bwd.long, bwd.bucket, bwd.width, bwd.grid, bwd.order, bwd.noise,
                           * bwd.delay */
  ref_bwd_config bwd;     /* opt, lr, eps, wd, lambda, clip, sr, step, bwd.*; the Philox seed
                           * is the case's seed; bwd.opt.kind == REF_OPT_NONE: forward only */
} tbe_knobs;

/* The case's knobs (valid as long as the case). */
const tbe_knobs *case_knobs(const tbe_case *c);

/* Builds the batch (malloc'd arrays; free with tbe_batch_free). The result passes
 * tbe_batch_validate. Returns TBE_ENOMEM if it does not fit. */
tbe_status case_generate(const tbe_case *c, tbe_batch *b);

/* Builds the backward's inputs for the batch b (as case_generate made it) with layout l:
 * *grad_output gets l->out_elems values of b->out_dtype (16-bit types as bits), drawn like the
 * weights (every value exact in the dtype, exponents spread so sums round); *momentum gets
 * ref_bwd_rows(b) positive fp32 values, one per row of every table (drawn per row, so a wrong
 * table or row offset reads a different value), when the optimizer is row-wise Adagrad, else
 * NULL. Both malloc'd; a pure function of the case.
 * Returns TBE_ENOMEM if they do not fit (nothing is left allocated then). */
tbe_status case_generate_backward(const tbe_case *c, const tbe_batch *b, const tbe_layout *l,
                                  void **grad_output, float **momentum);

/* One case of a .cases file: its text and where it came from. */
typedef struct {
  char *text;     /* the case text without comment */
  char *comment;  /* the comment after '#', or "" */
  int line;       /* 1-based line number */
} case_line;

typedef struct {
  case_line *lines;
  int count;
} case_list;

/* Reads a .cases file: one case per non-blank line; lines that are only a comment are skipped.
 * Cases are not parsed here. Returns TBE_EINVAL naming the path if it cannot be opened, is not
 * a regular file, or holds a NUL byte (which would cut a case short), TBE_EIO if reading it
 * fails. */
tbe_status case_file_read(const char *path, case_list *out);
void case_list_free(case_list *l);

/* Writes into buf the text of random valid case number `index` of the sweep seeded by `seed`
 * (small shapes, every option drawn). Returns the length as snprintf does. */
int case_random(uint64_t seed, uint64_t index, char *buf, size_t n);
/* The same for cases whose every feature takes the small-table tensor-core path (fwd.small=on,
 * each feature eligible: fp16 weights, fp32 output, SUM or MEAN, unweighted, no VBE, E <= 64,
 * D in 64..128 a multiple of 8), with bags past the histogram's 256 positions, repaired and
 * pruned indices, hot rows and shared tables: the campaign that holds the path to its model. */
int case_random_small(uint64_t seed, uint64_t index, char *buf, size_t n);

#endif
