/* backward_small.h: the small-table backward on the CPU (bwd.small_tc): which tables may take it,
 * the bit-accurate model of gpu/backward_small.cu's order, and its exact twin with bounds.
 * Not the normative backward (backward.h): this path is held to the model bit for bit and to
 * the exact gradient within a derived bound (ref/SEMANTICS.md 6).
 */
#ifndef REF_BACKWARD_SMALL_H
#define REF_BACKWARD_SMALL_H

#include "backward.h"
#include "forward_small.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bags per segment: the length of one pair of MMA chains (16 k-steps of REF_SMALL_K bags). It
 * fixes the order, so the GPU takes it from here. */
#define REF_SMALL_SEG 256

/* tables[j] (num_tables entries) = 1 where table j may take the path: row-wise Adagrad, at
 * least one feature maps to j and every feature that does ran on the small forward path
 * (small[t], the GPU's small_mask), so no row of j gets a contribution from elsewhere and the
 * forward saved every bag's counts. */
void ref_small_tc_tables(const tbe_batch *b, const ref_bwd_config *cfg, const unsigned char *small,
                         unsigned char *tables);

/* taken[j] = 1 where tables[j] and, in this call, every bag of j's features has L <= 256 (the
 * forward's histogram covers the whole bag, each count exact in fp16) and every element of G
 * (g: ref_bwd_build_g's) in those bags that are not empty has a finite fp16 part hi = fp16(G)
 * (|G| < 65520, not NaN). Elsewhere 0: the table goes the normative backward in the same call. */
void ref_small_tc_taken(const tbe_batch *b, const tbe_layout *l, const float *g,
                        const unsigned char *tables, unsigned char *taken);

/* ref_small_tc_taken from grad_output itself (G built as ref_bwd_build_g, clip from cfg): the
 * GPU's host-side view of the same rule. TBE_ENOMEM when G does not fit. */
tbe_status ref_small_tc_taken_from(const tbe_batch *b, const tbe_layout *l,
                                   const ref_bwd_config *cfg, const void *grad_output,
                                   const unsigned char *tables, unsigned char *taken);

/* The row gradients of a taken table j (order: backward_small.c's header): grad[r*D + d] for
 * r < E, and touched[r] = 1 where some bag counts row r (the rows the path updates). */
void ref_small_tc_row_grads(const tbe_batch *b, const tbe_layout *l, const float *g, int32_t j,
                            float *grad, unsigned char *touched);

/* The path on a validated, bounds-checked batch: taken (out, [num_tables]) as
 * ref_small_tc_taken says from tables; the touched rows of the taken tables updated in place
 * (weights and momentum, section 5's row update on the model's row gradients); every other row,
 * and every table not taken, untouched. TBE_EINVAL unless cfg is row-wise Adagrad. */
tbe_status ref_backward_small(tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg,
                              const void *grad_output, const unsigned char *tables,
                              float *momentum, unsigned char *taken);

/* The whole backward of a call with bwd.small_tc=on, as the GPU runs it: the taken tables by the
 * path (ref_backward_small), every other one by ref_backward, both from the same inputs; b's
 * weights, momentum and psw_grad as ref_backward's contract says, taken as above. */
tbe_status ref_backward_small_call(tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg,
                                   const void *grad_output, const unsigned char *tables,
                                   float *momentum, float *psw_grad, unsigned char *taken);

/* The exact twin on the inputs before the update, for the taken tables only (other elements of
 * the arrays are not written): every weight element and momentum of a touched row as an exact
 * value and a bound on how far the path may store from it; untouched rows their value, bound 0.
 * The derivation is in backward_small.c. */
tbe_status ref_backward_small_exact(const tbe_batch *b, const tbe_layout *l,
                                    const ref_bwd_config *cfg, const void *grad_output,
                                    const float *momentum, const unsigned char *taken,
                                    double *w_exact, double *w_bound, double *m_exact,
                                    double *m_bound);

#ifdef __cplusplus
}
#endif

#endif
