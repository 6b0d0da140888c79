/* forward_order_test.c: the external orders' forward models (forward_order.h) on bags crafted so
 * each rule changes the bits, and each model inside the bound of the algorithm it runs.
 */
#include <math.h>
#include <string.h>

#include "forward.h"
#include "forward_order.h"
#include "half.h"
#include "test_batch.h"
#include "test_util.h"

/* Weights of the crafted bags: element (j, row) of D = 1 tables, set by the test. */
static double w_at[2][8];
static double crafted(int32_t j, int64_t row, int32_t d)
{
  (void)d;
  return w_at[j][row];
}

/* One bag of table 0 (E = 8, D = 1) over rows idx[0..n), or of table 1 with two tables. */
static tbe_batch one_bag(tbe_dtype wt, tbe_dtype out, int64_t n, const int64_t *idx,
                         const float *psw, int tables)
{
  static int64_t E[2] = {8, 8}, off[3];
  static int32_t D[2] = {1, 1}, map[1];
  map[0] = tables - 1;
  off[0] = 0;
  off[1] = n;
  tb_spec s = {.num_tables = tables, .E = E, .D = D, .wdtype = wt, .T = 1, .map = map, .B = 1,
               .itype = TBE_I64, .N = n, .indices = idx, .offsets = off, .psw = psw,
               .pool = TBE_POOL_SUM, .out_dtype = out, .weight_fn = crafted};
  return tb_build(&s);
}

/* One bag of table 0 (E = 8, D = 1) beside an unread table 1 of D = 128, which makes the
 * Triton TBE's BLOCK_SIZE 128. */
static tbe_batch one_bag_block128(const int64_t *idx, const float *psw)
{
  static int64_t E[2] = {8, 8}, off[2] = {0, 4};
  static int32_t D[2] = {1, 128}, map[1] = {0};
  tb_spec s = {.num_tables = 2, .E = E, .D = D, .wdtype = TBE_FP32, .T = 1, .map = map, .B = 1,
               .itype = TBE_I64, .N = 4, .indices = idx, .offsets = off, .psw = psw,
               .pool = TBE_POOL_SUM, .out_dtype = TBE_FP32, .weight_fn = crafted};
  return tb_build(&s);
}

/* The model's output (one element) as a double, and whether it lies in its order's bound. */
static double model(ref_order o, tbe_batch *b, int *inside)
{
  tbe_layout l;
  tbe_layout_init(&l, b);
  float out32 = 0;
  uint16_t out16 = 0;
  void *out = b->out_dtype == TBE_FP32 ? (void *)&out32 : (void *)&out16;
  tbe_status s = ref_forward_order(o, b, &l, out);
  CHECK(s.code == TBE_OK, "%s: %s", ref_order_name(o), s.message);
  double v = b->out_dtype == TBE_FP32   ? out32
             : b->out_dtype == TBE_FP16 ? ref_half_to_float(out16)
                                        : ref_bf16_to_float(out16);
  double exact, bound;
  ref_forward_order_exact(o, b, &l, &exact, &bound);
  *inside = fabs(v - exact) <= bound;
  tbe_layout_free(&l);
  return v;
}

static double normative(tbe_batch *b)
{
  tbe_layout l;
  tbe_layout_init(&l, b);
  float out32 = 0;
  uint16_t out16 = 0;
  ref_forward(b, &l, b->out_dtype == TBE_FP32 ? (void *)&out32 : (void *)&out16);
  tbe_layout_free(&l);
  return b->out_dtype == TBE_FP32 ? out32 : ref_half_to_float(out16);
}

int main(void)
{
  const int64_t four[] = {0, 1, 2, 3}, eight[] = {0, 1, 2, 3, 4, 5, 6, 7};
  int in;
  /* FBGEMM CPU, fp32 weights: 1 + 3 * 2^-24 in fp32 one row at a time stays 1; the normative
   * fp64 sum rounds once, to 1 + 2^-22 (a tie, to even) */
  w_at[0][0] = 1.0;
  w_at[0][1] = w_at[0][2] = w_at[0][3] = 0x1p-24;
  tbe_batch b = one_bag(TBE_FP32, TBE_FP32, 4, four, NULL, 1);
  CHECK(model(REF_ORDER_FBGEMM_CPU, &b, &in) == 1.0 && in, "fbgemm fp32: %.17g",
        model(REF_ORDER_FBGEMM_CPU, &b, &in));
  CHECK(normative(&b) == 1.0 + 0x1p-22, "normative: %.17g", normative(&b));
  /* Triton, fp32 weights: the group ((1 + 2^-24) + 2^-24) + 2^-24 is 1 in fp32 before the fp64
   * accumulator sees it */
  CHECK(model(REF_ORDER_TRITON, &b, &in) == 1.0 && in, "triton fp32 group: %.17g",
        model(REF_ORDER_TRITON, &b, &in));
  tbe_batch_free(&b);
  /* Triton, 16-bit weights: the second group 4 * 2^-14 = 2^-12 lands on 1024 as one add (two
   * fp32 ulps there); one row at a time each 2^-14 is a quarter ulp and is lost */
  w_at[0][0] = 1024.0;
  w_at[0][1] = w_at[0][2] = w_at[0][3] = 0.0;
  for (int k = 4; k < 8; k++)
    w_at[0][k] = 0x1p-14;
  b = one_bag(TBE_FP16, TBE_FP32, 8, eight, NULL, 1);
  CHECK(model(REF_ORDER_TRITON, &b, &in) == 1024.0 + 0x1p-12 && in, "triton groups: %.17g",
        model(REF_ORDER_TRITON, &b, &in));
  CHECK(normative(&b) == 1024.0, "normative: %.17g", normative(&b));
  CHECK(model(REF_ORDER_FBGEMM_CPU, &b, &in) == 1024.0, "fbgemm fp16 is the normative order");
  tbe_batch_free(&b);
  /* Triton, fp32 weights into fp16: (1 + 2^-11) + 2^-40 rounds to fp32 1 + 2^-11, a tie in fp16
   * that goes to even, 1; rounded once it is above the tie, 1 + 2^-10. The double rounding
   * leaves the bound of one rounding: that is how the normative comparison finds it */
  w_at[0][0] = 1.0 + 0x1p-11;
  w_at[0][1] = 0x1p-40;
  b = one_bag(TBE_FP32, TBE_FP16, 2, four, NULL, 1);
  CHECK(model(REF_ORDER_TRITON, &b, &in) == 1.0 && !in, "triton double rounding: %.17g, %s",
        model(REF_ORDER_TRITON, &b, &in), in ? "inside the bound" : "outside");
  CHECK(normative(&b) == 1.0 + 0x1p-10, "normative: %.17g", normative(&b));
  tbe_batch_free(&b);
  /* Triton, weighted: the first pair of a group is r_a * w_a then fma(r_b, w_b, .). r0 * w0 =
   * 1 + 2^-22 + 2^-46: with (a, b) = (1, 0), BLOCK_SIZE below 128, the fma takes it whole and
   * its 2^-46 survives r1 * w1 = -(1 + 2^-22); with (0, 1), column 0 at BLOCK_SIZE 128, it is
   * rounded to 1 + 2^-22 first and the pair cancels */
  const float psw[4] = {1.0f + 0x1p-23f, 1.0f, 0.0f, 0.0f};
  w_at[0][0] = 1.0 + 0x1p-23;
  w_at[0][1] = -(1.0 + 0x1p-22);
  w_at[0][2] = w_at[0][3] = 0.0;
  b = one_bag(TBE_FP32, TBE_FP32, 4, four, psw, 1);
  CHECK(model(REF_ORDER_TRITON, &b, &in) == 0x1p-46 && in, "triton weighted pair, BLOCK 1: %.17g",
        model(REF_ORDER_TRITON, &b, &in));
  tbe_batch_free(&b);
  b = one_bag_block128(four, psw);
  CHECK(model(REF_ORDER_TRITON, &b, &in) == 0.0 && in, "triton weighted pair, BLOCK 128: %.17g",
        model(REF_ORDER_TRITON, &b, &in));
  tbe_batch_free(&b);
  /* Triton reads a pruned row (-1) of table 1 as table 0's last row; of table 0 it would read
   * before the weights, which the model refuses */
  const int64_t pruned[] = {-1};
  w_at[0][7] = 7.0;
  w_at[1][0] = 11.0;
  b = one_bag(TBE_FP32, TBE_FP32, 1, pruned, NULL, 2);
  CHECK(model(REF_ORDER_TRITON, &b, &in) == 7.0 && !in, "triton pruned row: %.17g",
        model(REF_ORDER_TRITON, &b, &in));
  CHECK(normative(&b) == 0.0, "normative pruned row: %.17g", normative(&b));
  tbe_batch_free(&b);
  b = one_bag(TBE_FP32, TBE_FP32, 1, pruned, NULL, 1);
  tbe_layout l;
  tbe_layout_init(&l, &b);
  float out = 0;
  CHECK(ref_forward_order(REF_ORDER_TRITON, &b, &l, &out).code == TBE_EINVAL,
        "a pruned row of table 0 was modelled");
  tbe_layout_free(&l);
  tbe_batch_free(&b);
  CHECK(ref_order_parse("triton") == REF_ORDER_TRITON && ref_order_parse("cuda") == -1,
        "order names");
  return TEST_MAIN_RESULT();
}
