/* backward.h: the TBE backward of TBE_SEMANTICS.md section 4 fused with the optimizers of section
 * 5 on the CPU: row-gradient sums in the normative order, per-sample-weight gradients, one update
 * per unique (table, row), and the exact twin with per-element bounds for the atomic combine.
 * Not the forward (forward.h) nor the optimizer's row arithmetic (optimizer.h).
 */
#ifndef REF_BACKWARD_H
#define REF_BACKWARD_H

#include <stdint.h>

#include "optimizer.h"
#include "tbe.h"

#ifdef __cplusplus
extern "C" {
#endif

#define REF_BWD_THRESHOLD 256 /* default long-run threshold: SL >= 256 is long */
#define REF_BWD_CHUNK 256     /* default contributions per chunk of a long run */

typedef enum { REF_COMBINE_DETERMINISTIC = 0, REF_COMBINE_ATOMIC = 1 } ref_combine;

/* One backward call's configuration: the optimizer and the knobs that change numerics. */
typedef struct {
  ref_opt_config opt;
  float clip;          /* > 0: clamp each grad_output element to [-clip, clip] first; 0: off */
  int64_t threshold;   /* runs with SL < threshold are summed in one sequence (>= 1) */
  int64_t chunk;       /* contributions per chunk of a longer run (>= 1) */
  ref_combine combine; /* how chunk partials are added: fp32 in ascending order, or (atomic)
                          fp64 in any order, rounded once; the reference adds in ascending
                          order, one of the orders atomic mode allows */
} ref_bwd_config;

/* Defaults: no optimizer, lr 0.01, eps 1e-8, no weight decay, no clipping, RNE write-back,
 * threshold and chunk 256, deterministic combine. */
void ref_bwd_config_default(ref_bwd_config *c);

/* 1 if a run of sl entries is long under c (SL >= threshold: summed in chunks, ref/SEMANTICS.md
 * 4), else 0: the one place that says which tier a run takes, for the reference, the GPU's
 * classification's twin, the campaign's cost model and the benches. */
int ref_bwd_is_long(const ref_bwd_config *c, int64_t sl);

/* Rows of all tables together (sum of E): the length of the momentum array. */
int64_t ref_bwd_rows(const tbe_batch *b);

/* Where the time went (milliseconds) and what the runs looked like. */
typedef struct {
  double prep_ms;      /* grad_output widened, clipped, MEAN-scaled */
  double sort_ms;      /* the transpose: keys, radix sort, runs */
  double psw_ms;       /* per-sample-weight gradients */
  double sums_ms;      /* row-gradient sums (these two: thread time / threads) */
  double opt_ms;       /* optimizer and write-back */
  int64_t entries;     /* lookups that are not -1 */
  int64_t runs;        /* unique (table, row) */
  int64_t long_runs;   /* runs with SL >= threshold */
  int64_t max_sl;
} ref_bwd_stats;

/* Runs the backward and the optimizer on a validated, bounds-checked batch:
 *   grad_output  l->out_elems elements of b->out_dtype (16-bit types as bits), the output layout;
 *   b->weights   updated in place: each unique (table, row) once, every other row untouched;
 *   momentum     [ref_bwd_rows(b)] fp32, row j's r-th row at rows_cumsum[j] + r, updated in
 *                place (Adagrad; may be NULL for SGD);
 *   psw_grad     [N] fp32 out when the batch is weighted (else may be NULL): the gradient of each
 *                per-sample weight, from the weights before the update; 0 at -1 positions and
 *                at positions outside every bag;
 *   stats        may be NULL.
 * cfg->opt.kind == REF_OPT_NONE computes only psw_grad. Bit-identical for any OpenMP thread
 * count. Returns TBE_EINVAL for an index outside its table (run the bounds check first) or a
 * bad configuration, TBE_ENOMEM when the work arrays do not fit. */
tbe_status ref_backward(tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg,
                        const void *grad_output, float *momentum, float *psw_grad,
                        ref_bwd_stats *stats);

/* The exact twin for bwd.combine=atomic, on the same inputs before the update (b's weights,
 * momentum): for every weight element, w_exact and w_bound such that any order of adding a long
 * run's chunk partials, followed by section 5's fp32 update and the write-back, stores a value
 * within w_bound of w_exact; m_exact and m_bound likewise for the momentum ([ref_bwd_rows(b)],
 * Adagrad only, else may be NULL). Rows whose runs have fewer than two chunks do not depend on
 * the order: their exact value is ref_backward's result and their bound 0; untouched rows keep
 * their value with bound 0. The derivation is in backward_exact.c. */
tbe_status ref_backward_exact(const tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg,
                              const void *grad_output, const float *momentum, double *w_exact,
                              double *w_bound, double *m_exact, double *m_bound);

/* The same for an implementation that evaluates sections 4 and 5 in an order of its own
 * (backward_order.h): each row gradient's contributions summed in fp32 in any order, the sum of
 * squares in any order, each product of an update either fused or rounded apart; every row is
 * then bounded, none taken as ref_backward's bits. */
tbe_status ref_backward_exact_free(const tbe_batch *b, const tbe_layout *l,
                                   const ref_bwd_config *cfg, const void *grad_output,
                                   const float *momentum, double *w_exact, double *w_bound,
                                   double *m_exact, double *m_bound);

/* The per-sample-weight gradients' exact values [N] and the bound of any fp32 order of their D
 * products (fused or not): (gamma32(D) + 2 gamma64(D)) * sum |G_d W_d| + D * 2^-150. */
tbe_status ref_psw_grad_exact_free(const tbe_batch *b, const tbe_layout *l,
                                   const ref_bwd_config *cfg, const void *grad_output,
                                   double *exact, double *bound);

#ifdef __cplusplus
}
#endif

#endif
