/* order.h: the accumulation orders of TBE implementations other than tbecheck's own (FBGEMM's
 * CPU TBE), as models: where each departs from the normative order, and the bits it computes.
 * Not the normative order (forward.h, backward.h) and not the engines that use them (harness/).
 *
 * An external engine declares its order; its outputs are then held to the model's bits (which
 * proves the adapter and the model right) and to the normative reference (which finds the
 * defects): bitwise where the order is the normative one, else within the bound of the
 * algorithm the order runs (ref_forward_exact_fp32 for an fp32 accumulator).
 */
#ifndef REF_ORDER_H
#define REF_ORDER_H

#include "tbe.h"

typedef enum {
  REF_ORDER_NORMATIVE = 0, /* TBE_SEMANTICS.md, as ref_forward and ref_backward compute it */
  /* FBGEMM's CPU TBE (fbgemm-gpu-cpu): the normative forward for 16-bit weights; for fp32
   * weights an fp32 accumulator, positions in increasing p one at a time from +0, acc + r or
   * fma(w, r, acc), MEAN by fp32 1.0f / L, one rounding of the fp32 sum into the output dtype */
  REF_ORDER_FBGEMM_CPU,
  REF_ORDER_COUNT
} ref_order;

/* "normative", "fbgemm_cpu". */
const char *ref_order_name(ref_order o);

/* The order called name; -1 when ref/ has no model of it. */
int ref_order_parse(const char *name);

/* 1 when order o computes b's forward in the normative order (its bits are ref_forward's). */
int ref_order_forward_is_normative(ref_order o, const tbe_batch *b);

/* 1 when o's forward on b accumulates in fp32 where the normative one uses fp64. */
int ref_order_forward_fp32(ref_order o, const tbe_batch *b);

/* b's forward in order o into out, as ref_forward's contract says (pooled SUM and MEAN; NONE,
 * which has no order, is ref_forward's). */
tbe_status ref_forward_order(ref_order o, const tbe_batch *b, const tbe_layout *l, void *out);

#endif
