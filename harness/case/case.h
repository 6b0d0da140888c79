/* case.h: the case language: one line of key=value tokens that names a TBE batch, its parse,
 * canonical print, and deterministic generation into a tbe_batch. Not the CLI (harness/cli/).
 *
 * Invariant: for every tbe_case c that case_parse accepted, case_format(c) is canonical (keys in
 * a fixed order, defaults omitted) and case_parse(case_format(c)) yields an equal case; the
 * canonical text is the case's identity. Generation (gen.h) and random cases (case_random.h)
 * have their own headers.
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
  gpu_fwd_config fwd;     /* fwd.bags, fwd.width, fwd.small, fwd.gather, fused_bounds */
  gpu_bwd_config gpu_bwd; /* bwd.long, bwd.bucket, bwd.direct, bwd.width, bwd.grid, bwd.order,
                           * bwd.noise, bwd.delay, bwd.steal, bwd.bulk, bwd.hoist, bwd.small_tc */
  ref_bwd_config bwd;     /* opt, lr, eps, wd, lambda, clip, sr, step, bwd.*; the Philox seed
                           * is the case's seed; bwd.opt.kind == REF_OPT_NONE: forward only */
} tbe_knobs;

/* The case's knobs (valid as long as the case). */
const tbe_knobs *case_knobs(const tbe_case *c);

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

/* Reads a .cases file (path "-": standard input, read to its end): one case per non-blank line;
 * lines that are only a comment are skipped. Cases are not parsed here. Returns TBE_EINVAL naming the path if it cannot be opened, is not
 * a regular file, or holds a NUL byte (which would cut a case short), TBE_EIO if reading it
 * fails. */
tbe_status case_file_read(const char *path, case_list *out);
void case_list_free(case_list *l);

#endif
