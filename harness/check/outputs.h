/* outputs.h: one engine's run on one case and its named outputs (copies of what the engine
 * computed, each on a path, with its coordinates), and pushing them. Not the checks (engine.c).
 *
 * Invariant: an eng_run with status ENG_PASS owns each of its n_out outputs' data (and small
 * flags); any other status has no outputs and says why in reason.
 */
#ifndef HARNESS_OUTPUTS_H
#define HARNESS_OUTPUTS_H

#include "backward.h"
#include "engine.h"

#define ENG_MAX_OUT 8

/* How an element index of an output maps to coordinates (eng_coordinates). */
typedef enum {
  COORD_POOLED,   /* pooled output: (t, b, d) through the layout's bag_out */
  COORD_UNPOOLED, /* pooling NONE: [N, D] -> (p, d) */
  COORD_POSITION, /* one element per index: p */
  COORD_BAG,      /* offsets: one element per bag, plus the last offset */
  COORD_VECTOR,   /* a short vector (warnings, offender): i */
  COORD_WEIGHT,   /* weights: (table, row, d) through table_offset */
  COORD_ROW       /* momentum: one element per row of every table: (table, row) */
} eng_coord;

typedef struct {
  const char *name, *path;
  eng_coord coord;
  int is_int;          /* integer values of itype, else floating values of dtype */
  tbe_dtype dtype;
  tbe_itype itype;
  void *data;          /* owned copy */
  int64_t n;
  unsigned char *small; /* [T], owned, or NULL: features whose elements (pooled) the engine
                         * computed on the small-table path: those are on path ENG_SMALL_PATH,
                         * the others on `path`; for weights and momentum, the features whose
                         * tables bwd.small_tc updated (ENG_SMALL_TC_PATH) */
  char fault[160];     /* what the engine saw wrong with it (guard regions, a rerun), or "" */
} eng_output;

#define ENG_SMALL_PATH "forward.small"
#define ENG_SMALL_TC_PATH "backward.small" /* the weights and momentum of bwd.small_tc's tables */

/* An output an engine does not give, and why: declined (a semantic difference the spec
 * allows: unsupported) or raised on (it failed on valid input: a failure). */
typedef struct {
  char output[16];
  char reason[240];
  int raised;
} eng_declined;

/* One engine's run on one case. */
typedef struct {
  eng_status status;   /* ENG_PASS: it ran; ERROR, SKIP, UNSUPPORTED: it produced nothing */
  char reason[320];    /* why it produced nothing */
  char stopped[320];   /* "" or the FATAL bounds check's message: why there is no "output" */
  double ms;
  eng_output out[ENG_MAX_OUT];
  int n_out;
  eng_declined declined[ENG_MAX_OUT]; /* outputs it does not give, with the reason */
  int n_declined;
} eng_run;

/* Appends a copy of n elements of data as output name on path, of dtype t (floating) or itype
 * t (integer), with coordinates coord. TBE_ENOMEM, or TBE_EINTERNAL past ENG_MAX_OUT. */
tbe_status eng_push_float(eng_run *r, const char *name, const char *path, eng_coord coord,
                          tbe_dtype t, const void *data, int64_t n);
tbe_status eng_push_int(eng_run *r, const char *name, const char *path, eng_coord coord,
                        tbe_itype t, const void *data, int64_t n);

/* Pushes the forward's output on path "forward": l->out_elems values of b->out_dtype; with
 * small (NULL: none), a copy of the [T] flags of the features computed on the small-table path,
 * when any is set. */
tbe_status eng_push_output(eng_run *r, const tbe_batch *b, const tbe_layout *l, const void *data,
                           const unsigned char *small);

/* The bounds check's outputs on path: repaired indices and offsets, the warning counter, and
 * for a FATAL stop the offender (bounds: the check's status), which also fills r->stopped. */
tbe_status eng_push_bounds(eng_run *r, const char *path, tbe_itype t, const void *indices,
                           int64_t N, const void *offsets, int64_t total_B, int64_t warnings,
                           tbe_status bounds);

/* The backward's outputs: weights and (Adagrad) momentum on path "backward", or
 * "backward.atomic" where cfg's combine order is free, and psw_grad (weighted) on "backward". */
tbe_status eng_push_backward(eng_run *r, const tbe_batch *b, const ref_bwd_config *cfg,
                             const void *weights, const float *momentum, const float *psw_grad);

/* Marks the weights and momentum outputs with small_tc ([T], NULL: none), the features whose
 * tables the engine updated by bwd.small_tc, when any is set: their tables' elements are then on
 * path ENG_SMALL_TC_PATH, the others on the output's path. */
tbe_status eng_mark_small_tc(eng_run *r, const tbe_batch *b, const unsigned char *small_tc);

/* The size in bytes of one element of o. */
size_t eng_elem_size(const eng_output *o);

/* The output named name, or NULL. */
const eng_output *eng_find(const eng_run *r, const char *name);

/* Why the run does not give the output called name, or NULL when it does not say; *raised
 * receives whether it raised on it (a failure) rather than declined it. */
const char *eng_declined_why(const eng_run *r, const char *name, int *raised);

/* Frees the run's outputs (n_out becomes 0). */
void eng_run_free(eng_run *r);

/* Marks the run as having produced nothing, with status st, for the reason given by s. */
void eng_fail_run(eng_run *r, eng_status st, tbe_status s);

#endif
