/* forward_test.c: hand-computed tiny forwards (SUM, MEAN, weighted, VBE layout, NONE), the
 * normative order and single rounding on store, thread-count invariance, and the exact mode's
 * bound (never exceeded; approached by sums built to lose the most).
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "forward.h"
#include "half.h"
#include "test_batch.h"
#include "test_util.h"

static double w_small(int32_t j, int64_t row, int32_t d) { return j * 100 + (double)row * 10 + d; }

/* Runs the forward into a fresh buffer (freed by the caller). */
static void *run(tbe_batch *b, tbe_layout *l)
{
  tbe_status st = tbe_batch_validate(b);
  CHECK(st.code == TBE_OK, "validate: %s", st.message);
  st = tbe_layout_init(l, b);
  CHECK(st.code == TBE_OK, "layout: %s", st.message);
  void *out = malloc(tbe_dtype_size(b->out_dtype) * (size_t)(l->out_elems + 1));
  st = ref_forward(b, l, out);
  CHECK(st.code == TBE_OK, "forward: %s", st.message);
  return out;
}

static tb_spec spec2(const int64_t *off, const int64_t *idx, int64_t N)
{
  static const int64_t E[] = {5, 6};
  static const int32_t D[] = {2, 3};
  tb_spec s = {
      .num_tables = 2,
      .E = E,
      .D = D,
      .T = 2,
      .B = 2,
      .itype = TBE_I64,
      .N = N,
      .offsets = off,
      .indices = idx,
      .weight_fn = w_small,
  };
  return s;
}

static void test_sum_mean(void)
{
  /* bags: f0 b0 = rows {1, 2, 4}; f0 b1 = {}; f1 b0 = {0, -1}; f1 b1 = {5} */
  static const int64_t off[] = {0, 3, 3, 5, 6};
  static const int64_t idx[] = {1, 2, 4, 0, -1, 5};
  tb_spec s = spec2(off, idx, 6);
  tbe_layout l;
  for (int mean = 0; mean < 2; mean++) {
    s.pool = mean ? TBE_POOL_MEAN : TBE_POOL_SUM;
    tbe_batch b = tb_build(&s);
    float *out = run(&b, &l);
    /* out is (B=2, total_D=5): row b = [f0 d0 d1 | f1 d0 d1 d2] */
    double f0b0[2] = {10 + 20 + 40, 11 + 21 + 41};
    if (mean)
      for (int d = 0; d < 2; d++)
        f0b0[d] = f0b0[d] * (1.0 / 3.0);
    double f1b0[3] = {100, 101, 102}; /* -1 adds nothing but counts in L */
    if (mean)
      for (int d = 0; d < 3; d++)
        f1b0[d] = f1b0[d] * (1.0 / 2.0);
    float want[10] = {(float)f0b0[0], (float)f0b0[1], (float)f1b0[0], (float)f1b0[1],
                      (float)f1b0[2], 0, 0, 150, 151, 152};
    for (int i = 0; i < 10; i++)
      CHECK(out[i] == want[i], "%s out[%d] = %.9g, want %.9g", mean ? "mean" : "sum", i,
            (double)out[i], (double)want[i]);
    free(out);
    tbe_layout_free(&l);
    tbe_batch_free(&b);
  }
}

static void test_weighted(void)
{
  static const int64_t off[] = {0, 2, 2, 3, 3};
  static const int64_t idx[] = {1, 3, 2};
  static const float psw[] = {0.5f, -2.0f, 3.0f};
  tb_spec s = spec2(off, idx, 3);
  s.psw = psw;
  s.wdtype = TBE_FP16;
  tbe_layout l;
  tbe_batch b = tb_build(&s);
  float *out = run(&b, &l);
  float want[10] = {0.5f * 10 - 2 * 30, 0.5f * 11 - 2 * 31, 3 * 120, 3 * 121, 3 * 122,
                    0, 0, 0, 0, 0};
  for (int i = 0; i < 10; i++)
    CHECK(out[i] == want[i], "weighted out[%d] = %g, want %g", i, (double)out[i],
          (double)want[i]);
  free(out);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
}

/* One table of one column whose rows are given values; one bag over the given rows. */
static double row_values[8];
static double w_rows(int32_t j, int64_t row, int32_t d)
{
  (void)j;
  (void)d;
  return row_values[row];
}

static tbe_batch one_bag(tbe_dtype wdtype, tbe_dtype out, const int64_t *idx, int64_t L)
{
  static const int64_t E[] = {8};
  static const int32_t D[] = {1};
  int64_t off[2] = {0, L};
  tb_spec s = {
      .num_tables = 1,
      .E = E,
      .D = D,
      .wdtype = wdtype,
      .T = 1,
      .B = 1,
      .itype = TBE_I32,
      .N = L,
      .indices = idx,
      .offsets = off,
      .out_dtype = out,
      .weight_fn = w_rows,
  };
  return tb_build(&s);
}

static void test_order_and_rounding(void)
{
  tbe_layout l;
  /* fp32 accumulator, positions in order: 1 + 2^-24 ties to 1, twice; reversed, the small
   * terms first add up to 2^-23 and survive. 2^-24 is an fp16 subnormal, exact. */
  row_values[0] = 1.0;
  row_values[1] = 0x1p-24;
  static const int64_t fwd[] = {0, 1, 1}, rev[] = {1, 1, 0};
  tbe_batch b = one_bag(TBE_FP16, TBE_FP32, fwd, 3);
  float *out = run(&b, &l);
  CHECK(out[0] == 1.0f, "in-order fp32 sum %a, want 1", (double)out[0]);
  free(out);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
  b = one_bag(TBE_FP16, TBE_FP32, rev, 3);
  out = run(&b, &l);
  CHECK(out[0] == 1.0f + 0x1p-23f, "reversed fp32 sum %a, want 1+2^-23", (double)out[0]);
  free(out);
  tbe_layout_free(&l);
  tbe_batch_free(&b);

  /* MEAN multiplies by 1/L (fp32 for fp16 weights): 5 * fl(1/3) rounds up where 5/3 rounds
   * down */
  row_values[0] = 1.0;
  row_values[1] = 2.0;
  static const int64_t five[] = {0, 1, 1};
  b = one_bag(TBE_FP16, TBE_FP32, five, 3);
  b.pool = TBE_POOL_MEAN;
  out = run(&b, &l);
  volatile float L3 = 3.0f;
  CHECK(out[0] == 5.0f * (1.0f / L3) && out[0] != 5.0f / L3, "MEAN %a", (double)out[0]);
  free(out);
  tbe_layout_free(&l);
  tbe_batch_free(&b);

  /* fp64 accumulator stored to fp16 rounds once: 1 + 2^-11 + 2^-40 -> 1 + 2^-10 (0x3C01);
   * through fp32 it would tie down to 1 (0x3C00). */
  row_values[0] = 1.0;
  row_values[1] = 0x1p-11;
  row_values[2] = 0x1p-40;
  static const int64_t three[] = {0, 1, 2};
  b = one_bag(TBE_FP32, TBE_FP16, three, 3);
  uint16_t *h = run(&b, &l);
  CHECK(h[0] == 0x3C01, "fp64 -> fp16 store 0x%04x, want 0x3C01", h[0]);
  free(h);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
  /* the same for bf16: 1 + 2^-8 + 2^-40 -> 0x3F81 */
  row_values[1] = 0x1p-8;
  b = one_bag(TBE_FP32, TBE_BF16, three, 3);
  h = run(&b, &l);
  CHECK(h[0] == 0x3F81, "fp64 -> bf16 store 0x%04x, want 0x3F81", h[0]);
  free(h);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
}

static void test_vbe(void)
{
  /* D = (4, 8), R = 2, B = [[1,2],[3,1]] (TBE_SEMANTICS.md section 1); bag k holds row k % 5 */
  static const int64_t E[] = {5, 5};
  static const int32_t D[] = {4, 8};
  static const int32_t Bv[] = {1, 2, 3, 1};
  static const int64_t off[] = {0, 1, 2, 3, 4, 5, 6, 7};
  static const int64_t idx[] = {0, 1, 2, 3, 4, 0, 1};
  tb_spec s = {
      .num_tables = 2,
      .E = E,
      .D = D,
      .T = 2,
      .R = 2,
      .B_vbe = Bv,
      .itype = TBE_I64,
      .N = 7,
      .indices = idx,
      .offsets = off,
      .weight_fn = w_small,
  };
  tbe_batch b = tb_build(&s);
  tbe_layout l;
  float *out = run(&b, &l);
  CHECK(l.out_elems == 44, "VBE output has %lld values, want 44", (long long)l.out_elems);
  /* block (r, f) start, then (feature, first bag of that block) */
  static const struct { int start, f, bag; } blocks[] = {{0, 0, 0}, {4, 1, 3}, {28, 0, 1},
                                                           {36, 1, 6}};
  static const int nbags[] = {1, 3, 2, 1};
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < nbags[k]; i++) {
      int dd = D[blocks[k].f], bag = blocks[k].bag + i;
      for (int d = 0; d < dd; d++) {
        float want = (float)w_small(blocks[k].f, idx[bag], d);
        float got = out[blocks[k].start + i * dd + d];
        CHECK(got == want, "VBE block %d sample %d d %d: %g, want %g", k, i, d, (double)got,
              (double)want);
      }
    }
  free(out);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
}

static void test_none(void)
{
  static const int64_t E[] = {4, 3};
  static const int32_t D[] = {2, 2};
  static const int64_t off[] = {0, 2, 3};
  static const int64_t idx[] = {3, -1, 2};
  tb_spec s = {
      .num_tables = 2,
      .E = E,
      .D = D,
      .T = 2,
      .B = 1,
      .itype = TBE_I64,
      .N = 3,
      .indices = idx,
      .offsets = off,
      .pool = TBE_POOL_NONE,
      .wdtype = TBE_BF16,
      .out_dtype = TBE_FP16,
      .weight_fn = w_small,
  };
  tbe_batch b = tb_build(&s);
  tbe_layout l;
  uint16_t *out = run(&b, &l);
  CHECK(l.out_elems == 6, "NONE output [N, D] = 6 values, got %lld", (long long)l.out_elems);
  float want[6] = {30, 31, 0, 0, 120, 121};
  for (int i = 0; i < 6; i++)
    CHECK(ref_half_to_float(out[i]) == want[i], "NONE out[%d] = %g, want %g", i,
          (double)ref_half_to_float(out[i]), (double)want[i]);
  free(out);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
}

/* A random batch of mixed shapes for invariance and bound checks. */
static uint64_t seed_state;
static double w_random(int32_t j, int64_t row, int32_t d)
{
  uint64_t x = seed_state ^ ((uint64_t)j << 50) ^ ((uint64_t)row << 12) ^ (uint64_t)d;
  x = (x ^ (x >> 31)) * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 29)) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  double m = 1.0 + (double)(x & 0xFFFFF) * 0x1p-20;
  int e = (int)((x >> 20) % 16) - 12;
  return ((x >> 40) & 1 ? -m : m) * ldexp(1.0, e);
}

static tbe_batch random_batch(uint64_t seed, tbe_dtype wd, tbe_dtype od, tbe_pool pool,
                              int weighted)
{
  static const int64_t E[] = {97, 13, 300};
  static const int32_t D[] = {7, 64, 33};
  static const int32_t map[] = {0, 1, 2, 0};
  enum { T = 4, B = 50 };
  static int64_t off[T * B + 1], idx[T * B * 40];
  static float psw[T * B * 40];
  seed_state = seed;
  uint64_t x = seed * 2654435761u + 1;
  off[0] = 0;
  for (int i = 0; i < T * B; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    int L = (int)((x >> 33) % 40);
    off[i + 1] = off[i] + L;
    for (int64_t p = off[i]; p < off[i + 1]; p++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      int64_t e = E[map[i / B]];
      idx[p] = (x >> 60) == 0 ? -1 : (int64_t)((x >> 20) % (uint64_t)e);
      psw[p] = (float)(((double)((x >> 8) & 0xFFFFFF) - 0x800000) * 0x1p-22);
    }
  }
  tb_spec s = {
      .num_tables = 3,
      .E = E,
      .D = D,
      .wdtype = wd,
      .T = T,
      .map = map,
      .B = B,
      .itype = TBE_I64,
      .N = off[T * B],
      .indices = idx,
      .offsets = off,
      .psw = weighted ? psw : NULL,
      .pool = pool,
      .out_dtype = od,
      .weight_fn = w_random,
  };
  return tb_build(&s);
}

static void test_threads_and_bound(void)
{
  for (int wd = 0; wd < 3; wd++)
    for (int od = 0; od < 3; od++)
      for (int mode = 0; mode < 3; mode++) {
        tbe_pool pool = mode == 2 ? TBE_POOL_MEAN : TBE_POOL_SUM;
        tbe_batch b = random_batch(7 + (uint64_t)(wd * 9 + od * 3 + mode), (tbe_dtype)wd,
                                   (tbe_dtype)od, pool, mode == 1);
        tbe_layout l;
        omp_set_num_threads(1);
        void *one = run(&b, &l);
        tbe_layout_free(&l);
        omp_set_num_threads(2);
        void *two = run(&b, &l);
        size_t bytes = (size_t)l.out_elems * tbe_dtype_size(b.out_dtype);
        CHECK(memcmp(one, two, bytes) == 0, "wd %d od %d mode %d: 1 and 2 threads differ", wd,
              od, mode);
        double *exact = malloc(sizeof(double) * (size_t)l.out_elems);
        double *bound = malloc(sizeof(double) * (size_t)l.out_elems);
        CHECK(ref_forward_exact(&b, &l, exact, bound).code == TBE_OK, "exact");
        double worst = 0;
        for (int64_t i = 0; i < l.out_elems; i++) {
          double y = od == TBE_FP32   ? ((float *)two)[i]
                     : od == TBE_FP16 ? ref_half_to_float(((uint16_t *)two)[i])
                                      : ref_bf16_to_float(((uint16_t *)two)[i]);
          double err = fabs(y - exact[i]);
          CHECK(err <= bound[i], "wd %d od %d mode %d: element %lld off by %g > bound %g", wd,
                od, mode, (long long)i, err, bound[i]);
          if (bound[i] > 0 && err / bound[i] > worst)
            worst = err / bound[i];
        }
        free(exact);
        free(bound);
        free(one);
        free(two);
        tbe_layout_free(&l);
        tbe_batch_free(&b);
      }
}

/* 1 followed by n-1 terms of 2^-24 in an fp32 accumulator: every add ties back to 1, losing
 * (n-1)*2^-24, while the bound is gamma(n-1) * (1 + (n-1)*2^-24): the ratio tends to 1. */
static void test_bound_is_approached(void)
{
  enum { L = 1000 };
  static int64_t idx[L];
  row_values[0] = 1.0;
  row_values[1] = 0x1p-24;
  for (int p = 0; p < L; p++)
    idx[p] = p ? 1 : 0;
  tbe_batch b = one_bag(TBE_FP16, TBE_FP32, idx, L);
  tbe_layout l;
  float *out = run(&b, &l);
  double exact, bound;
  CHECK(ref_forward_exact(&b, &l, &exact, &bound).code == TBE_OK, "exact");
  double ratio = fabs((double)out[0] - exact) / bound;
  CHECK(out[0] == 1.0f, "sum %a", (double)out[0]);
  CHECK(ratio <= 1.0 && ratio > 0.99, "error/bound = %.6f, want in (0.99, 1]", ratio);
  free(out);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
}

/* Inf and NaN weights are valid input: the exact value of a bag holding them is their IEEE sum
 * (+Inf, -Inf, or NaN for Infs of both signs or a NaN) with bound 0, and the forward computes
 * exactly that. (A TwoSum over an Inf gave NaN with a NaN bound.) */
static void test_exact_nonfinite(void)
{
  static const struct {
    int64_t idx[3];
    double want;
  } bags[] = {{{0, 1, 1}, INFINITY}, {{2, 1, 1}, -INFINITY}, {{0, 2, 1}, NAN}, {{3, 1, 0}, NAN}};
  row_values[0] = INFINITY;
  row_values[1] = 1.0;
  row_values[2] = -INFINITY;
  row_values[3] = NAN;
  for (int k = 0; k < 4; k++)
    for (int mean = 0; mean < 2; mean++) {
      tbe_batch b = one_bag(TBE_FP16, TBE_FP32, bags[k].idx, 3);
      b.pool = mean ? TBE_POOL_MEAN : TBE_POOL_SUM;
      tbe_layout l;
      float *out = run(&b, &l);
      double exact, bound;
      CHECK(ref_forward_exact(&b, &l, &exact, &bound).code == TBE_OK, "exact");
      int same = isnan(bags[k].want) ? isnan(exact) && isnan(out[0])
                                     : exact == bags[k].want && out[0] == bags[k].want;
      CHECK(same && bound == 0, "bag %d mean %d: exact %g, forward %g, bound %g, want %g", k,
            mean, exact, (double)out[0], bound, bags[k].want);
      free(out);
      tbe_layout_free(&l);
      tbe_batch_free(&b);
    }
}

int main(void)
{
  test_sum_mean();
  test_weighted();
  test_order_and_rounding();
  test_vbe();
  test_none();
  test_threads_and_bound();
  test_bound_is_approached();
  test_exact_nonfinite();
  return TEST_MAIN_RESULT();
}
