/* forward_order.h: the accumulation orders of TBE implementations other than tbecheck's own (FBGEMM's
 * CPU TBE), as models: where each departs from the normative order, and the bits it computes.
 * Not the normative order (forward.h, backward.h) and not the engines that use them (harness/).
 *
 * An external engine declares its order; its outputs are then held to the model's bits (which
 * proves the adapter and the model right) and to the normative reference (which finds the
 * defects): bitwise where the order is the normative one, else within the bound of the
 * algorithm the order runs (ref_forward_order_exact).
 */
#ifndef REF_FORWARD_ORDER_H
#define REF_FORWARD_ORDER_H

#include "tbe.h"

typedef enum {
  REF_ORDER_NORMATIVE = 0, /* TBE_SEMANTICS.md, as ref_forward and ref_backward compute it */
  /* FBGEMM's CPU TBE (fbgemm-gpu-cpu): the normative forward for 16-bit weights; for fp32
   * weights an fp32 accumulator, positions in increasing p one at a time from +0, acc + r or
   * fma(w, r, acc), MEAN by fp32 1.0f / L, one rounding of the fp32 sum into the output dtype */
  REF_ORDER_FBGEMM_CPU,
  /* torchrec's Triton TBE (its generic forward kernels, ../shared/reference/triton_tbe.md 2.1,
   * 2.2): the accumulator of the normative forward, which takes groups of 4 rows (8, as two
   * groups, when the batch is fixed, B >= 65536 and the weights 16-bit), each summed in fp32
   * ((r0 + r1) + r2) + r3, then the rest one row at a time; weighted, a group is
   * fma(r3, w3, fma(r2, w2, fma(rb, wb, ra * wa))), where BLOCK_SIZE (the widest table's D
   * rounded up to a power of two) is at least 128 (64 with fp32 weights), with (a, b) = (0, 1)
   * in the even 32-column slots and (1, 0) in the odd ones, and with (1, 0) everywhere below
   * (its compiler's choice, measured on the H200 by cases/triton_vectors.cases, BLOCK_SIZE 4 to
   * 2048, fp32, fp16 and bf16), and a
   * tail row fma(r, w, acc) (fp32 acc) or acc + fl32(r * w) (fp64); the store goes through fp32
   * (twice rounded from fp64). A pruned row (-1) reads the flat element 1 row before the table
   * (the previous table's last row): the defect the normative comparison finds. No MEAN. */
  REF_ORDER_TRITON,
  REF_ORDER_COUNT
} ref_order;

/* The Triton TBE's BLOCK_SIZE for b: the widest table's D rounded up to a power of two (its
 * kernels' tile width, on which the orders the compiler chooses depend). */
int32_t ref_triton_block(const tbe_batch *b);

/* "normative", "fbgemm_cpu", "triton". */
const char *ref_order_name(ref_order o);

/* The order called name; -1 when ref/ has no model of it. */
int ref_order_parse(const char *name);

/* 1 when order o computes b's forward in the normative order (its bits are ref_forward's). */
int ref_order_forward_is_normative(ref_order o, const tbe_batch *b);

/* The exact forward of b and the bound of the algorithm order o runs (ref_forward_exact_acc
 * with its accumulator and fp32 groups): what o's output may be held to where it is not the
 * normative one. */
tbe_status ref_forward_order_exact(ref_order o, const tbe_batch *b, const tbe_layout *l,
                                   double *exact, double *bound);

/* 1 when order o's WARNING counter is not TBE_SEMANTICS 2's: FBGEMM's CPU fixes the last
 * offset first, then judges each bag by its start as the previous bag's repair left it (its
 * repaired indices and offsets are the normative ones). A semantic difference the spec leaves
 * open: such a counter is held to ref_bounds_order_warnings only. */
int ref_order_counter_differs(ref_order o);

/* The WARNING counter order o reports for the pristine (not yet repaired) indices and offsets
 * of b (b's own are not read): for FBGEMM's CPU its rule above, else TBE_SEMANTICS 2's. */
int64_t ref_bounds_order_warnings(ref_order o, const tbe_batch *b, const tbe_layout *l,
                                  const void *indices, const void *offsets);

/* b's forward in order o into out, as ref_forward's contract says (pooled SUM and MEAN; NONE,
 * which has no order, is ref_forward's). TBE_EINVAL where o has no such forward (Triton's
 * MEAN, a pruned row of the first table, which it reads from before the weights). */
tbe_status ref_forward_order(ref_order o, const tbe_batch *b, const tbe_layout *l, void *out);

#endif
