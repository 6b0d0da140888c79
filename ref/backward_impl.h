/* backward_impl.h: the pieces ref_backward (backward.c, backward_short.c, backward_long.c) and
 * ref_backward_exact (backward_exact.c) share: the effective gradient, the transpose, and the
 * row-gradient sums. Twin of gpu/backward_impl.cuh; not public: the rest of tbecheck goes through
 * backward.h.
 *
 * Accumulation order (TBE_SEMANTICS.md section 4): a contribution of entry k to column d is
 * G[row of k's bag][d] (or w_k * G as an fma when weighted), where G is grad_output widened to
 * fp32, clamped to [-clip, clip] when clipping, and for MEAN multiplied by fp32 1.0f/(float)L of
 * the bag. ref_bwd_sum_entries (backward_short.c) sums entries in sorted order from +0, one at a
 * time: acc = acc + c_k, or acc = fma(w_k, G, acc). A run with SL < threshold is one such sum
 * (ref_bwd_short_grad); a longer run is cut into chunks of `chunk` entries, each summed from +0,
 * and ref_bwd_long_grad (backward_long.c) adds the partials in ascending chunk order starting
 * from the first partial: in fp32, or in atomic mode in fp64 with one rounding to fp32 at the end
 * (ref/SEMANTICS.md 4).
 */
#ifndef REF_BACKWARD_IMPL_H
#define REF_BACKWARD_IMPL_H

#include "backward.h"
#include "transpose.h"

/* One call's shared state. */
typedef struct {
  const tbe_batch *b;
  const tbe_layout *l;
  const ref_bwd_config *cfg;
  float *g;           /* [l->out_elems] the effective gradient G, owned (in huge pages: its
                         rows are read at random) */
  ref_transpose tr;
} ref_bwd_work;

/* Checks cfg against the batch, builds G and the transpose; adds their times to stats (may be
 * NULL). On failure nothing is left to free. */
tbe_status ref_bwd_work_init(ref_bwd_work *w, const tbe_batch *b, const tbe_layout *l,
                             const ref_bwd_config *cfg, const void *grad_output,
                             ref_bwd_stats *stats);
void ref_bwd_work_free(ref_bwd_work *w);

/* g[0..l->out_elems) = G: grad_output widened to fp32, clamped to [-clip, clip] when clip > 0,
 * then MEAN bags multiplied by fp32 1.0f/(float)L (the per-bag rule of TBE_SEMANTICS.md 4). */
void ref_bwd_build_g(const tbe_batch *b, const tbe_layout *l, float clip, const void *go,
                     float *g);

/* The bytes a prefetch loop steps by. */
#define REF_BWD_CACHE_LINE 64

/* acc[d] = acc[d] + r[d] for d in [0, D), in fp32 (backward_short.c). */
void ref_bwd_add_row(float *acc, const float *r, int32_t D);

/* acc[0..D) = the sum from +0 of the contributions of sorted entries [s, e), in order
 * (backward_short.c). */
void ref_bwd_sum_entries(const ref_bwd_work *w, int64_t s, int64_t e, int32_t D, float *acc);

/* g[0..D) = the row gradient of run r, SL < threshold: one ref_bwd_sum_entries over the run
 * (backward_short.c). */
void ref_bwd_short_grad(const ref_bwd_work *w, int64_t r, int32_t D, float *g);

/* Chunks of run r: 1 when SL < threshold, else ceil(SL / chunk) (backward_long.c). */
int64_t ref_bwd_chunks(const ref_bwd_work *w, int64_t r);

/* g[0..D) = the row gradient of run r, SL >= threshold: the chunk partials combined as the
 * config's combine mode says; part holds D floats of scratch (backward_long.c). */
void ref_bwd_long_grad(const ref_bwd_work *w, int64_t r, int32_t D, float *g, float *part);

/* g[0..D) = run r's row gradient in the normative order, short or long by its SL; part holds D
 * floats of scratch (backward.c). */
void ref_bwd_row_grad(const ref_bwd_work *w, int64_t r, int32_t D, float *g, float *part);

/* Step 2 of row-wise Adagrad (ref_lane_dot(gd, gd, D)) in backward_exact.c's analysis:
 * returns the bound on |ref_lane_dot(gd, gd, D) - *exact|, *exact = sum gd_d^2 (fp64). */
double ref_bwd_sum_squares_bound(const float *gd, int32_t D, double *exact);

/* Section 5's update of one row in backward_exact.c's running-error analysis, in the normative
 * fp32 order: from row gradients g_exact[d] with |computed - g_exact| <= g_bound[d], the row's
 * exact weights w (D fp32) and momentum m, the updated weights' exact values and bounds after
 * the write-back into t (w_exact, w_bound: D each) and the momentum's (*m_exact, *m_bound;
 * Adagrad only). The one propagation that atomic mode and the small-table backward share. */
void ref_bwd_update_bound(const ref_opt_config *o, tbe_dtype t, int32_t D, const double *g_exact,
                          const double *g_bound, const float *w, float m, double *w_exact,
                          double *w_bound, double *m_exact, double *m_bound);

/* The element offset of row `row` of table j in the weights. (Its momentum is at its linear
 * key, tr.rows_cumsum[j] + row.) */
static inline int64_t ref_bwd_weight_at(const tbe_batch *b, int32_t j, int64_t row)
{
  return b->table_offset[j] + row * b->D[j];
}

#endif
