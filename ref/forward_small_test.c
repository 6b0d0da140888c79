/* forward_small_test.c: the tensor-core model against dot products measured on the H200, the
 * small-table path's order on hand-built bags, and its bound on adversarial and random bags.
 * Not the GPU probe (gpu/forward_small_probe_test.cu), which holds the hardware to this model.
 */
#include <math.h>
#include <string.h>

#include "bits.h"
#include "forward.h"
#include "forward_small.h"
#include "mma_h200_vectors.h"
#include "test_batch.h"
#include "test_util.h"

/* weight (row, d) of the single table; w_rows alternates the sign by column */
static double value[64][128];
static double w_table(int32_t j, int64_t row, int32_t d)
{
  (void)j;
  return value[row][d];
}
static void set_rows(const double *row_value, int64_t E, int alternate)
{
  for (int64_t r = 0; r < E; r++)
    for (int32_t d = 0; d < 128; d++)
      value[r][d] = row_value[r] * (alternate && d % 2 ? -1.0 : 1.0);
}

static void test_h200_vectors(void)
{
  /* every recorded dot product, bit for bit */
  int n = (int)(sizeof ref_mma_h200 / sizeof ref_mma_h200[0]), bad = 0;
  for (int v = 0; v < n; v++) {
    const ref_mma_vector *x = &ref_mma_h200[v];
    const uint32_t d = ref_f32_bits(ref_mma_f16_f32(x->a, x->b, ref_bits_f32(x->c)));
    if (d != x->d && bad++ < 5)
      CHECK(0, "vector %d (%s): model 0x%08x, H200 0x%08x\n", v, ref_mma_h200_family[x->family],
            d, x->d);
  }
  CHECK(bad == 0, "%d of %d recorded dot products differ from the model\n", bad, n);
  CHECK(n >= 200, "only %d recorded vectors\n", n);
}

/* One feature of one table (E rows, D columns), bags given by off (B + 1) and idx; returns the
 * worst error / bound of the model against the exact sum (and checks error <= bound). */
static double model_vs_bound(const char *what, int64_t E, int32_t D, int B, const int64_t *off,
                             const int64_t *idx, tbe_pool pool, float *out0)
{
  tb_spec s = {
      .num_tables = 1,
      .E = &E,
      .D = &D,
      .wdtype = TBE_FP16,
      .T = 1,
      .B = B,
      .itype = TBE_I64,
      .N = off[B],
      .indices = idx,
      .offsets = off,
      .pool = pool,
      .out_dtype = TBE_FP32,
      .weight_fn = w_table,
  };
  tbe_batch b = tb_build(&s);
  tbe_layout l;
  tbe_layout_init(&l, &b);
  static const unsigned char all[] = {1};
  CHECK(ref_small_eligible(&b, 0), "%s: the feature should be eligible\n", what);
  float *out = malloc(sizeof(float) * (size_t)l.out_elems);
  double *exact = malloc(sizeof(double) * (size_t)l.out_elems);
  double *bound = malloc(sizeof(double) * (size_t)l.out_elems);
  ref_forward_small_model(&b, &l, all, out);
  ref_forward_exact_tc(&b, &l, all, exact, bound);
  double worst = 0;
  int bad = 0;
  for (int64_t i = 0; i < l.out_elems; i++) {
    double err = fabs((double)out[i] - exact[i]);
    if (!(err <= bound[i]) && bad++ < 3)
      CHECK(0, "%s: element %lld: error %g > bound %g\n", what, (long long)i, err, bound[i]);
    if (bound[i] > 0 && err / bound[i] > worst)
      worst = err / bound[i];
  }
  if (out0)
    *out0 = out[0];
  printf("%-34s worst error/bound %.3f\n", what, worst);
  free(out);
  free(exact);
  free(bound);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
  return worst;
}

static void test_crafted_bag(void)
{
  /* issue 11: E = 16, row 0 = 2.0 hit 128 times, rows 1-15 = 1.875 * 2^-16 once each. The H200
   * gives 0x1.000016p+8 (emax = 8: the small terms truncate to 2^-17 multiples, then RZ); the
   * exact sum is 256.000429; the older model's bound (2u * A) was exceeded 3x */
  double rows[16] = {2.0};
  for (int r = 1; r < 16; r++)
    rows[r] = 1.875 * 0x1p-16;
  set_rows(rows, 16, 0);
  static int64_t idx[143];
  for (int p = 0; p < 143; p++)
    idx[p] = p < 128 ? 0 : p - 127;
  const int64_t off[] = {0, 143};
  float v;
  double worst = model_vs_bound("crafted bag", 16, 64, 1, off, idx, TBE_POOL_SUM, &v);
  CHECK(ref_f32_bits(v) == 0x4380000bu, "crafted bag: model %a, H200 0x1.000016p+8\n", (double)v);
  CHECK(worst > 0.5, "crafted bag: error/bound %g: the bound got looser\n", worst);
}

static void test_adversarial(void)
{
  /* the truncation's worst case in every one of the 4 chunk steps: C = 2048 (set by chunk 0's
   * row 0) is emax in each, so q = 11 - 25, and 15 rows of 0x1.ffcp-14 per chunk each lose just
   * under 2^q; the 15 kept 2^q then lose 3 more to the final RZ: 18 of the bound's 20 * 2^q per
   * step. Columns alternate the sign. */
  double rows[64];
  for (int r = 0; r < 64; r++)
    rows[r] = r == 0 ? 2048.0 : r % 16 ? 0x1.ffcp-14 : 0.0;
  set_rows(rows, 64, 1);
  static int64_t idx[4000];
  int64_t n = 0;
  for (int r = 0; r < 64; r++)
    if (rows[r] != 0)
      idx[n++] = r;
  int64_t off[] = {0, n};
  double worst = model_vs_bound("max truncation, 4 steps", 64, 64, 1, off, idx, TBE_POOL_SUM, NULL);
  CHECK(worst > 0.85, "max truncation: error/bound %g: the bound got looser\n", worst);

  /* negative tiny terms under a positive big one (truncated toward zero: the sum grows), then a
   * long tail past 256 positions, and MEAN */
  for (int r = 0; r < 64; r++)
    rows[r] = r == 0 ? 1000.0 : -(1.0 + r / 64.0) * 0x1p-16;
  set_rows(rows, 64, 0);
  n = 0;
  for (int p = 0; p < 3000; p++)
    idx[n++] = p % 7 ? p % 64 : 0;
  off[1] = n;
  model_vs_bound("negative tail, L = 3000 (sum)", 64, 64, 1, off, idx, TBE_POOL_SUM, NULL);
  model_vs_bound("negative tail, L = 3000 (mean)", 64, 64, 1, off, idx, TBE_POOL_MEAN, NULL);

  /* subnormal fp16 rows: the alignment sees 2^-14 for each, not its value */
  for (int r = 0; r < 64; r++)
    rows[r] = (r + 1) * 0x1p-24 * (r % 3 ? 1 : -1);
  set_rows(rows, 64, 1);
  n = 0;
  for (int p = 0; p < 256; p++)
    idx[n++] = p < 200 ? 5 : p % 64;
  off[1] = n;
  model_vs_bound("subnormal rows", 64, 64, 1, off, idx, TBE_POOL_SUM, NULL);

  /* cancellation: +x and -x rows hit equally, with a few odd rows: exact sums near 0 */
  for (int r = 0; r < 64; r++)
    rows[r] = (r % 2 ? -1.0 : 1.0) * ldexp(1.0 + (r / 2) / 32.0, (r / 2) % 20 - 8);
  set_rows(rows, 64, 0);
  n = 0;
  for (int p = 0; p < 250; p++)
    idx[n++] = p % 64;
  off[1] = n;
  model_vs_bound("cancellation", 64, 64, 1, off, idx, TBE_POOL_SUM, NULL);
}

static uint64_t next(uint64_t *x)
{
  *x = *x * 6364136223846793005ull + 1442695040888963407ull;
  return *x >> 33;
}

static void test_random(void)
{
  /* random fp16 tables of every chunk count, exponents from subnormal to 2^15, both signs; bags
   * of 0..400 positions skewed to few rows (large counts), some -1 */
  static int64_t idx[100 * 400];
  static int64_t off[101];
  uint64_t x = 12345;
  double worst = 0;
  for (int64_t E = 1; E <= 64; E += 9) {
    for (int64_t r = 0; r < E; r++)
      for (int32_t d = 0; d < 128; d++) {
        int ex = (int)(next(&x) % 40) - 24;
        value[r][d] = ldexp(1.0 + (double)(next(&x) % 1024) / 1024.0, ex) * (next(&x) % 2 ? -1 : 1);
      }
    off[0] = 0;
    for (int i = 0; i < 100; i++) {
      off[i + 1] = off[i] + (int64_t)(next(&x) % 400);
      for (int64_t p = off[i]; p < off[i + 1]; p++) {
        uint64_t y = next(&x);
        idx[p] = y % 64 == 0 ? -1 : (int64_t)((y >> 8) % (uint64_t)(y % 3 ? 4 : E) % (uint64_t)E);
      }
    }
    for (int mean = 0; mean < 2; mean++) {
      char what[64];
      snprintf(what, sizeof what, "random E = %lld (%s)", (long long)E, mean ? "mean" : "sum");
      double w = model_vs_bound(what, E, 128, 100, off, idx, mean ? TBE_POOL_MEAN : TBE_POOL_SUM,
                                NULL);
      worst = w > worst ? w : worst;
    }
  }
  CHECK(worst > 0, "the model never rounded: the test proves nothing\n");
}

/* One feature, one bag of the given rows; E rows, D = 64; returns the model's and the generic
 * forward's column 0. */
static float model_of(const int64_t *idx, int64_t L, int64_t E, float *generic)
{
  int32_t D = 64;
  int64_t off[2] = {0, L};
  tb_spec s = {
      .num_tables = 1,
      .E = &E,
      .D = &D,
      .wdtype = TBE_FP16,
      .T = 1,
      .B = 1,
      .itype = TBE_I64,
      .N = L,
      .indices = idx,
      .offsets = off,
      .out_dtype = TBE_FP32,
      .weight_fn = w_table,
  };
  tbe_batch b = tb_build(&s);
  tbe_layout l;
  tbe_layout_init(&l, &b);
  static const unsigned char all[] = {1};
  float out[64], gen[64];
  ref_forward_small_model(&b, &l, all, out);
  ref_forward(&b, &l, gen);
  *generic = gen[0];
  tbe_layout_free(&l);
  tbe_batch_free(&b);
  return out[0];
}

static void test_order(void)
{
  /* 1 + 3 * 2^-24 in one chunk: kept (2^-24 is above the alignment's 2^-25), RZ gives
   * 1 + 2^-23 (RN would give 1 + 2^-22); the sequential order ties every add back to 1 */
  double rows[17] = {1.0, 0x1p-24};
  set_rows(rows, 17, 0);
  static const int64_t idx[] = {0, 1, 1, 1};
  float generic, m = model_of(idx, 4, 16, &generic);
  CHECK(m == 1.0f + 0x1p-23f, "model %a, want 1 + 2^-23\n", (double)m);
  CHECK(generic == 1.0f, "generic %a, want 1\n", (double)generic);

  /* the same terms across two chunks: chunk 1 adds 3 * 2^-24 to C = 1: still 1 + 2^-23 */
  rows[1] = 0;
  rows[16] = 0x1p-24;
  set_rows(rows, 17, 0);
  static const int64_t idx2[] = {0, 16, 16, 16};
  m = model_of(idx2, 4, 17, &generic);
  CHECK(m == 1.0f + 0x1p-23f, "two chunks %a\n", (double)m);

  /* 1024 and 15 rows of 511 * 2^-24, each just below the alignment's 2^(10 - 25): each is
   * lost, so 1024 (an exact chunk sum, 1024 + 3.7 ulp, would round toward zero to 1024 + 3 ulp) */
  rows[16] = 0;
  rows[0] = 1024.0;
  for (int r = 1; r < 16; r++)
    rows[r] = 511 * 0x1p-24;
  set_rows(rows, 17, 0);
  static const int64_t idx3[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  m = model_of(idx3, 16, 16, &generic);
  CHECK(m == 1024.0f, "terms below the alignment: %a, want 1024\n", (double)m);

  /* 256 hits of row 0 (=1) through the histogram, then 2^-24 twice in the tail, RN each time:
   * 256 + 2^-24 rounds back to 256 */
  rows[0] = 1.0;
  rows[1] = 0x1p-24;
  set_rows(rows, 2, 0);
  static int64_t idx4[258];
  for (int p = 0; p < 256; p++)
    idx4[p] = 0;
  idx4[256] = idx4[257] = 1;
  m = model_of(idx4, 258, 2, &generic);
  CHECK(m == 256.0f, "tail %a, want 256\n", (double)m);
}

int main(void)
{
  test_h200_vectors();
  test_order();
  test_crafted_bag();
  test_adversarial();
  test_random();
  return TEST_MAIN_RESULT();
}
