/* backward_order.h: the backward and optimizer in another implementation's order (FBGEMM's CPU
 * TBE), the model an external engine's updated weights, momentum and per-sample-weight
 * gradients are held to bit for bit. Not the normative backward (backward.h).
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
 * model of it (Triton's, bf16 or stochastic rounding for FBGEMM's CPU, a pruned row, which
 * FBGEMM's CPU refuses). */
tbe_status ref_backward_order(ref_order o, tbe_batch *b, const tbe_layout *l,
                              const ref_bwd_config *cfg, const void *grad_output,
                              float *momentum, float *psw_grad);

#endif
