/* forward.h: the pooled (and unpooled) TBE forward of TBE_SEMANTICS.md section 3 on the CPU, in
 * the normative order, and its exact twin with a per-element error bound (section 6).
 * Not the GPU kernels (gpu/), which must match ref_forward bit for bit.
 */
#ifndef REF_FORWARD_H
#define REF_FORWARD_H

#include "tbe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Computes the forward output into out (l->out_elems elements of b->out_dtype; fp16/bf16 as
 * uint16 bits). Indices must be in range or -1 (run the bounds check first). Bit-identical for
 * any OpenMP thread count. */
tbe_status ref_forward(const tbe_batch *b, const tbe_layout *l, void *out);

/* For each output element: exact[i], the mathematically exact value rounded once to double, and
 * bound[i] such that |ref_forward's output - exact| <= bound, derived from the accumulation
 * order (gamma(k) * sum|x|, MEAN's scaling, the store's half ulp; see forward.c). */
tbe_status ref_forward_exact(const tbe_batch *b, const tbe_layout *l, double *exact,
                             double *bound);

/* The same, where features with tc_mask[t] != 0 took the small-table tensor-core path: their
 * bound counts its roundings (one per 16-row chunk, with 2u for the round-toward-zero adds, then
 * one per position past the histogram's 256) instead of the sequential order's. */
tbe_status ref_forward_exact_tc(const tbe_batch *b, const tbe_layout *l,
                                const unsigned char *tc_mask, double *exact, double *bound);

/* The same for a forward in another order (forward_order.h): its accumulator fp64 (fp64_acc,
 * for fp32 weights) or fp32, in any order, an fp64 one taking its rows in fp32 sums of
 * fp32_group rows (0: none; weighted, every product rounded to fp32): the bound any such
 * algorithm may reach, (gamma_acc(k) + gamma32(fp32_group)) * A, with MEAN's scaling and one
 * rounding of the store into the output dtype. */
tbe_status ref_forward_exact_acc(const tbe_batch *b, const tbe_layout *l, int fp64_acc,
                                 int fp32_group, double *exact, double *bound);

#ifdef __cplusplus
}
#endif

#endif
