/* forward_small_test.c: the tensor-core model (round-toward-zero per 16-row chunk, exact chunk
 * sums, the tail past 256 positions) on hand-built bags, and its bound on random ones.
 */
#include <math.h>
#include <string.h>

#include "forward.h"
#include "forward_small.h"
#include "test_batch.h"
#include "test_util.h"

static double row_value[64];
static double w_rows(int32_t j, int64_t row, int32_t d)
{
  (void)j;
  return row_value[row] * (d % 2 ? -1.0 : 1.0);
}

/* One feature, one bag of the given rows; E rows, D = 64. */
static tbe_batch bag_of(const int64_t *idx, int64_t L, int64_t E)
{
  static const int32_t D[] = {64};
  int64_t off[2] = {0, L};
  tb_spec s = {
      .num_tables = 1,
      .E = &E,
      .D = D,
      .wdtype = TBE_FP16,
      .T = 1,
      .B = 1,
      .itype = TBE_I64,
      .N = L,
      .indices = idx,
      .offsets = off,
      .out_dtype = TBE_FP32,
      .weight_fn = w_rows,
  };
  return tb_build(&s);
}

static float model_of(tbe_batch *b, float *generic)
{
  tbe_layout l;
  tbe_layout_init(&l, b);
  static const unsigned char all[] = {1};
  CHECK(ref_small_eligible(b, 0), "the bag's feature should be eligible");
  float out[64], gen[64];
  ref_forward_small_model(b, &l, all, out);
  ref_forward(b, &l, gen);
  *generic = gen[0];
  tbe_layout_free(&l);
  return out[0];
}

static void test_round_toward_zero(void)
{
  /* 1 + 3 * 2^-24 in one chunk: exact sum 1 + 1.5 ulp; RZ gives 1 + 2^-23 (RN would give
   * 1 + 2^-22); the sequential order ties every add back to 1 */
  memset(row_value, 0, sizeof row_value);
  row_value[0] = 1.0;
  row_value[1] = 0x1p-24;
  static const int64_t idx[] = {0, 1, 1, 1};
  tbe_batch b = bag_of(idx, 4, 16);
  float generic, m = model_of(&b, &generic);
  CHECK(m == 1.0f + 0x1p-23f, "model %a, want 1 + 2^-23", (double)m);
  CHECK(generic == 1.0f, "generic %a, want 1", (double)generic);
  tbe_batch_free(&b);

  /* the same terms split across two chunks: 1 (chunk 0), then 3 * 2^-24 (chunk 1) added with
   * RZ: still 1 + 2^-23 */
  row_value[1] = 0;
  row_value[16] = 0x1p-24;
  static const int64_t idx2[] = {0, 16, 16, 16};
  b = bag_of(idx2, 4, 17);
  m = model_of(&b, &generic);
  CHECK(m == 1.0f + 0x1p-23f, "two chunks %a", (double)m);
  tbe_batch_free(&b);
}

static void test_tail_past_256(void)
{
  /* 256 hits of row 0 (=1) through the histogram, then 2^-24 twice in the tail, RN each time:
   * 256 + 2^-24 rounds back to 256 */
  memset(row_value, 0, sizeof row_value);
  row_value[0] = 1.0;
  row_value[1] = 0x1p-24;
  static int64_t idx[258];
  for (int p = 0; p < 256; p++)
    idx[p] = 0;
  idx[256] = idx[257] = 1;
  tbe_batch b = bag_of(idx, 258, 2);
  float generic, m = model_of(&b, &generic);
  CHECK(m == 256.0f, "tail %a, want 256", (double)m);
  /* in the histogram they would have counted: 1*(256) + 2*2^-24, RZ -> 256 as well, but with
   * 130 small hits the chunk sum 256 + 130*2^-24 keeps a bit the tail would lose */
  tbe_batch_free(&b);
}

static void test_bound(void)
{
  /* random eligible bags: the model stays within the tensor-core bound of the exact sum */
  static int64_t idx[100 * 400];
  static int64_t off[101];
  static const int32_t D[] = {128};
  int64_t E = 50;
  for (int r = 0; r < 50; r++)
    row_value[r] = ldexp(1.0 + r / 64.0, (r * 7) % 23 - 12);
  uint64_t x = 12345;
  off[0] = 0;
  for (int i = 0; i < 100; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    off[i + 1] = off[i] + (int64_t)((x >> 33) % 400);
    for (int64_t p = off[i]; p < off[i + 1]; p++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      idx[p] = (x >> 58) == 0 ? -1 : (int64_t)((x >> 20) % 50);
    }
  }
  tb_spec s = {
      .num_tables = 1,
      .E = &E,
      .D = D,
      .wdtype = TBE_FP16,
      .T = 1,
      .B = 100,
      .itype = TBE_I64,
      .N = off[100],
      .indices = idx,
      .offsets = off,
      .out_dtype = TBE_FP32,
      .weight_fn = w_rows,
  };
  for (int mean = 0; mean < 2; mean++) {
    s.pool = mean ? TBE_POOL_MEAN : TBE_POOL_SUM;
    tbe_batch b = tb_build(&s);
    tbe_layout l;
    tbe_layout_init(&l, &b);
    static float out[100 * 128];
    static double exact[100 * 128], bound[100 * 128];
    static const unsigned char all[] = {1};
    ref_forward_small_model(&b, &l, all, out);
    ref_forward_exact_tc(&b, &l, all, exact, bound);
    double worst = 0;
    for (int64_t i = 0; i < l.out_elems; i++) {
      double err = fabs((double)out[i] - exact[i]);
      CHECK(err <= bound[i], "element %lld: error %g > bound %g", (long long)i, err, bound[i]);
      if (bound[i] > 0 && err / bound[i] > worst)
        worst = err / bound[i];
    }
    CHECK(worst > 0, "the model never rounded: the test proves nothing");
    tbe_layout_free(&l);
    tbe_batch_free(&b);
  }
}

int main(void)
{
  test_round_toward_zero();
  test_tail_past_256();
  test_bound();
  return TEST_MAIN_RESULT();
}
