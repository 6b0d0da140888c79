/* backward_order.h: the backward and optimizer in another implementation's order (FBGEMM's CPU
 * TBE, torchrec's Triton TBE), the model an external engine's updated weights, momentum and
 * per-sample-weight gradients are held to. Not the normative backward (backward.h).
 *
 * FBGEMM CPU (fbgemm-gpu-cpu 1.8.0, measured bit for bit by harness/check/ext/fbgemm_check.py):
 *   - features go in groups, maximal runs of consecutive features of one table; each group
 *     updates each of its rows once, groups in feature order (a table shared by features that
 *     are not adjacent is updated once per group, each update seeing the one before);
 *   - G is grad_output widened to fp32 and clamped to [-clip, clip]; a row's gradient sums its
 *     lookups in (feature, bag, position) order from +0: g + G unweighted SUM, else
 *     fma(c, G, g) with c = w_p (weighted) or fl32(1.0 / L) (MEAN: not scaled beforehand);
 *   - the per-sample-weight gradient is fma(G_d, W_d, dw) over d = 0, 1, ... from +0;
 *   - SGD: fma(-lr, g, w) on fp32 weights; fp16 weights fp16(w - fp16(fl(lr * g)));
 *   - row-wise Adagrad on fp32 weights and output, a group of one pooled feature (its JIT path):
 *     s in 8 lanes s_l + fl(g_d * g_d), d = l, l+8, ..., then ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7));
 *     m + fl(s / D); mu = -lr / (sqrt(m) + eps); w + fl(g * mu); the weight decay is dropped
 *     (L2 and DECOUPLE behave as NONE: the defect the normative comparison finds);
 *   - row-wise Adagrad otherwise: gd = g, or fma(lambda, w, g) with L2; s = s + fl(gd * gd) over
 *     d from +0 (an fma for fp16 weights with L2, as its compiler chose); m + fl(s / D);
 *     mu = lr / (sqrt(m) + eps); c = 1, fl(1 - fl(mu * lambda)) (L2), fl(1 - fl(lr * lambda))
 *     (DECOUPLE); w = fma(c, w, -fl(g * mu)), rounded once to fp16 weights.
 */
#ifndef REF_BACKWARD_ORDER_H
#define REF_BACKWARD_ORDER_H

#include "backward.h"
#include "forward_order.h"

/* 1 when order o computes b's backward in the normative order (its bits are ref_backward's). */
int ref_order_backward_is_normative(ref_order o);

/* The backward and optimizer of b in order o, with ref_backward's contract for weights,
 * momentum and psw_grad (the deterministic combine: o's own order). TBE_EINVAL where o has no
 * model of it (bf16 or stochastic rounding for FBGEMM's CPU, a pruned row, which FBGEMM's CPU
 * refuses; for Triton's, ref_backward_triton's). */
tbe_status ref_backward_order(ref_order o, tbe_batch *b, const tbe_layout *l,
                              const ref_bwd_config *cfg, const void *grad_output,
                              float *momentum, float *psw_grad);

/* 1, with the reason in why[n], when order o's model cannot know output (weights, momentum or
 * psw_grad) of b, though it computes one (ref_backward_triton_declines). */
int ref_backward_order_declines(ref_order o, const tbe_batch *b, const tbe_layout *l,
                                const ref_bwd_config *cfg, const char *output, char *why,
                                size_t n);

/* The rule of order o's model that breaks TBE_SEMANTICS and touches element k of output
 * `output` ("output", "weights" or "momentum"; cfg: the backward's, NULL for a forward) of b, by
 * its name, or NULL when none does: what explains an element that matches the model but leaves
 * the normative bound (the engine's defect). Triton's: the store through fp32 of an fp64 sum
 * into a 16-bit output; a pruned row (-1) read, and updated, as the D elements before its table.
 * FBGEMM's CPU: the weight decay its fp32 fast path drops; fp16 SGD's step rounded to fp16;
 * clipping to the clip value rounded to fp16; a shared table updated once per group of adjacent
 * features. */
const char *ref_order_defect(ref_order o, const tbe_batch *b, const tbe_layout *l,
                             const ref_bwd_config *cfg, const char *output, int64_t k);

/* torchrec's Triton TBE (backward_order_triton.c; ../shared/reference/triton_tbe.md 3, 4): one
 * warp per run; runs of fewer than 256 entries summed in buffers of 8 rows (16 weighted) from +0,
 * a buffer by tl.sum (each lane its rows in order, then butterfly shuffles; weighted, the second
 * product rounded and the first fused onto it), then the rest one at a time (g + x, or
 * fma(x, w, g)); longer runs in chunks of 256 so summed, added onto +0 by atomics in any order;
 * SGD fma(-lr, g, w); row-wise Adagrad with the sum of squares as tl.sum over BLOCK_SIZE (per
 * lane below 32 lanes of columns, each column taking its lane's), m + s / D by div.full,
 * lr / (sqrt.approx(m) + eps), fma(-rate, g, w), lane 0's momentum stored; psw_grad the same
 * 1-D sum of row * grad_output, lane 0's. The weights' pairing through an unstable sort and the
 * stochastic rounding are not knowable (ref_backward_triton_declines). Where the GPU's own
 * arithmetic is approximate (div.full, sqrt.approx) or its order free (three or more chunks), the
 * model computes in IEEE fp32 in its order and w_slack / m_slack (when given; [weights] and
 * [ref_bwd_rows(b)]) hold how far the GPU's stored values may lie from the model's: 0 where the
 * model is bitwise. TBE_EINVAL for what it has no model of (MEAN, BLOCK_SIZE below 4, a pruned
 * row of the first table). */
tbe_status ref_backward_triton(tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg,
                               const void *grad_output, float *momentum, float *psw_grad,
                               double *w_slack, double *m_slack);

/* 1, with the reason in why[n], when the Triton model cannot know output (weights, momentum or
 * psw_grad) of b: the weights under stochastic rounding, or the weights and momentum of a row
 * looked up with different per-sample weights. */
int ref_backward_triton_declines(const tbe_batch *b, const tbe_layout *l,
                                 const ref_bwd_config *cfg, const char *output, char *why,
                                 size_t n);

#endif
