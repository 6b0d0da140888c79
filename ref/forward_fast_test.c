/* forward_fast_test.c: ref_forward's fast machinery (row prefetch across bags, F16C/AVX2 rows)
 * held bit for bit to a plain scalar loop. Not the hand-computed order tests (forward_test.c).
 *
 * The scalar loop below is the normative order written as plainly as possible: per bag and
 * column, from +0, positions in increasing order, -1 skipped, acc + r or fma(w, r, acc) in the
 * accumulator's precision, MEAN's multiply by 1/L, one rounding on store. Batches mix every D
 * from 1 to 40 with wide ones (64, 127..129, 300, 2048) so both the eight-column body and the
 * tail run, features sharing tables (the lookahead crosses tables), empty bags, -1 positions,
 * and weights drawn with subnormals, signed zeros, Inf and NaN. NaN payloads are not compared.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "forward.h"
#include "half.h"
#include "test_batch.h"
#include "test_util.h"

static uint64_t rng;
static uint64_t next_u64(void)
{
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A weight's bits: mostly normal values of moderate size, sometimes a subnormal, a signed zero,
 * Inf, NaN or any pattern at all. */
static uint32_t weight_bits(tbe_dtype t)
{
  uint64_t r = next_u64();
  int man_bits = t == TBE_FP32 ? 23 : t == TBE_FP16 ? 10 : 7;
  int exp_bits = t == TBE_FP16 ? 5 : 8;
  int bias = (1 << (exp_bits - 1)) - 1;
  uint32_t sign = (uint32_t)(r & 1) << (man_bits + exp_bits);
  uint32_t man = (uint32_t)(r >> 8) & ((1u << man_bits) - 1);
  uint32_t inf = ((1u << exp_bits) - 1) << man_bits;
  uint32_t kind = (uint32_t)(r >> 40) % 1000;
  if (kind < 900)
    return sign | ((uint32_t)(bias - 6 + (int)((r >> 50) % 12)) << man_bits) | man;
  if (kind < 960)
    return sign | man; /* subnormal (or zero) */
  if (kind < 980)
    return sign;
  if (kind < 984)
    return sign | inf;
  if (kind < 988)
    return sign | inf | 1u | man;
  return (uint32_t)(r >> 16) & (t == TBE_FP32 ? 0xFFFFFFFFu : 0xFFFFu);
}

static double widen(const tbe_batch *b, int64_t e)
{
  if (b->wdtype == TBE_FP32)
    return ((const float *)b->weights)[e];
  uint16_t h = ((const uint16_t *)b->weights)[e];
  return b->wdtype == TBE_FP16 ? ref_half_to_float(h) : ref_bf16_to_float(h);
}

static uint32_t out_bits(const void *out, tbe_dtype t, int64_t i, int *is_nan)
{
  if (t == TBE_FP32) {
    float f = ((const float *)out)[i];
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    *is_nan = isnan(f);
    return u;
  }
  uint16_t h = ((const uint16_t *)out)[i];
  *is_nan = isnan(t == TBE_FP16 ? ref_half_to_float(h) : ref_bf16_to_float(h));
  return h;
}

static void store(void *out, tbe_dtype t, int64_t i, double v)
{
  if (t == TBE_FP32)
    ((float *)out)[i] = (float)v;
  else if (t == TBE_FP16)
    ((uint16_t *)out)[i] = ref_double_to_half(v);
  else
    ((uint16_t *)out)[i] = ref_double_to_bf16(v);
}

/* The plain loop: the expected output of a pooled batch. */
static void scalar_pooled(const tbe_batch *b, const tbe_layout *l, void *out)
{
  for (int64_t i = 0; i < l->total_B; i++) {
    int32_t j = b->feature_table_map[l->bag_feature[i]];
    int32_t D = b->D[j];
    int64_t start = tbe_iget(b->offsets, b->itype, i), end = tbe_iget(b->offsets, b->itype, i + 1);
    for (int32_t d = 0; d < D; d++) {
      double acc64 = 0.0;
      float acc32 = 0.0f;
      for (int64_t p = start; p < end; p++) {
        int64_t idx = tbe_iget(b->indices, b->itype, p);
        if (idx == -1)
          continue;
        double r = widen(b, b->table_offset[j] + idx * D + d);
        if (b->wdtype == TBE_FP32)
          acc64 = b->per_sample_weights ? fma(b->per_sample_weights[p], r, acc64) : acc64 + r;
        else
          acc32 = b->per_sample_weights ? fmaf(b->per_sample_weights[p], (float)r, acc32)
                                        : acc32 + (float)r;
      }
      if (b->pool == TBE_POOL_MEAN && end > start) {
        acc64 = acc64 * (1.0 / (double)(end - start));
        acc32 = acc32 * (1.0f / (float)(end - start));
      }
      store(out, b->out_dtype, l->bag_out[i] + d, b->wdtype == TBE_FP32 ? acc64 : acc32);
    }
  }
}

/* The plain loop for pooling NONE: output row p is row indices[p], zeros for -1. */
static void scalar_none(const tbe_batch *b, const tbe_layout *l, void *out)
{
  for (int64_t i = 0; i < l->total_B; i++) {
    int32_t j = b->feature_table_map[l->bag_feature[i]];
    int32_t D = b->D[j];
    for (int64_t p = tbe_iget(b->offsets, b->itype, i); p < tbe_iget(b->offsets, b->itype, i + 1);
         p++) {
      int64_t idx = tbe_iget(b->indices, b->itype, p);
      for (int32_t d = 0; d < D; d++)
        store(out, b->out_dtype, p * D + d,
              idx == -1 ? 0.0 : widen(b, b->table_offset[j] + idx * D + d));
    }
  }
}

/* A random batch: tables with the given D (all equal for NONE), four features per table in a
 * shuffled map, B bags each of 0..max_L positions with about 5% -1. */
static tbe_batch random_batch(const int32_t *D, int32_t num_tables, tbe_dtype wd, tbe_dtype od,
                              tbe_itype it, tbe_pool pool, int weighted, int32_t B, int max_L)
{
  enum { E_ROWS = 37, MAX_TABLES = 64 };
  int64_t E[MAX_TABLES];
  int32_t map[4 * MAX_TABLES];
  int32_t T = 4 * num_tables;
  for (int32_t j = 0; j < num_tables; j++)
    E[j] = E_ROWS;
  for (int32_t t = 0; t < T; t++)
    map[t] = t % num_tables;
  for (int32_t t = T - 1; t > 0; t--) {
    int32_t k = (int32_t)(next_u64() % (uint64_t)(t + 1)), x = map[t];
    map[t] = map[k];
    map[k] = x;
  }
  int64_t total_B = (int64_t)T * B;
  int64_t *off = malloc(sizeof(int64_t) * (size_t)(total_B + 1));
  int64_t *idx = malloc(sizeof(int64_t) * (size_t)(total_B * max_L + 1));
  float *psw = malloc(sizeof(float) * (size_t)(total_B * max_L + 1));
  off[0] = 0;
  for (int64_t i = 0; i < total_B; i++) {
    off[i + 1] = off[i] + (int64_t)(next_u64() % (uint64_t)(max_L + 1));
    for (int64_t p = off[i]; p < off[i + 1]; p++) {
      uint64_t r = next_u64();
      idx[p] = r % 20 == 0 ? -1 : (int64_t)((r >> 8) % E_ROWS);
      psw[p] = (float)ldexp((double)((int64_t)(r >> 32) % 2001 - 1000), -9);
    }
  }
  tb_spec s = {
      .num_tables = num_tables,
      .E = E,
      .D = D,
      .wdtype = wd,
      .T = T,
      .map = map,
      .B = B,
      .itype = it,
      .N = off[total_B],
      .indices = idx,
      .offsets = off,
      .psw = weighted ? psw : NULL,
      .pool = pool,
      .out_dtype = od,
  };
  tbe_batch b = tb_build(&s);
  int64_t elems = b.table_offset[num_tables];
  for (int64_t e = 0; e < elems; e++) {
    uint32_t w = weight_bits(wd);
    if (wd == TBE_FP32)
      memcpy((float *)b.weights + e, &w, sizeof w);
    else
      ((uint16_t *)b.weights)[e] = (uint16_t)w;
  }
  free(off);
  free(idx);
  free(psw);
  return b;
}

/* ref_forward at 1 and 2 threads against the plain loop; returns elements that differ. */
static int64_t compare_forward(tbe_batch *b, const char *what)
{
  tbe_layout l;
  tbe_status st = tbe_batch_validate(b);
  CHECK(st.code == TBE_OK, "%s: validate: %s", what, st.message);
  st = tbe_layout_init(&l, b);
  CHECK(st.code == TBE_OK, "%s: layout: %s", what, st.message);
  size_t bytes = tbe_dtype_size(b->out_dtype) * (size_t)(l.out_elems + 1);
  void *want = calloc(1, bytes), *got = malloc(bytes);
  if (b->pool == TBE_POOL_NONE)
    scalar_none(b, &l, want);
  else
    scalar_pooled(b, &l, want);
  int64_t bad = 0;
  for (int threads = 1; threads <= 2; threads++) {
    omp_set_num_threads(threads);
    memset(got, 0xA5, bytes);
    st = ref_forward(b, &l, got);
    CHECK(st.code == TBE_OK, "%s: forward: %s", what, st.message);
    for (int64_t i = 0; i < l.out_elems; i++) {
      int nan_w, nan_g;
      uint32_t w = out_bits(want, b->out_dtype, i, &nan_w);
      uint32_t g = out_bits(got, b->out_dtype, i, &nan_g);
      if (w != g && !(nan_w && nan_g)) {
        if (bad < 3)
          CHECK(0, "%s, %d threads: element %lld is 0x%08X, plain loop 0x%08X", what, threads,
                (long long)i, g, w);
        bad++;
      }
    }
  }
  free(want);
  free(got);
  tbe_layout_free(&l);
  return bad;
}

/* Every D from 1 to 40 plus wide ones, in all dtype, pooling and weighting combinations. */
static void test_pooled_mixed_D(void)
{
  int32_t D[48];
  int32_t n = 0;
  for (int32_t d = 1; d <= 40; d++)
    D[n++] = d;
  static const int32_t wide[] = {64, 127, 128, 129, 300, 2048};
  for (size_t k = 0; k < sizeof wide / sizeof wide[0]; k++)
    D[n++] = wide[k];
  for (int wd = 0; wd < 3; wd++)
    for (int od = 0; od < 3; od++)
      for (int mode = 0; mode < 3; mode++) {
        rng = 1000 + (uint64_t)(wd * 9 + od * 3 + mode);
        tbe_pool pool = mode == 2 ? TBE_POOL_MEAN : TBE_POOL_SUM;
        tbe_batch b = random_batch(D, n, (tbe_dtype)wd, (tbe_dtype)od, (wd + od) % 2 ? TBE_I32
                                                                                    : TBE_I64,
                                   pool, mode == 1, 3, 24);
        char what[96];
        snprintf(what, sizeof what, "pooled w%s out%s %s%s", tbe_dtype_name(b.wdtype),
                 tbe_dtype_name(b.out_dtype), tbe_pool_name(pool), mode == 1 ? " weighted" : "");
        int64_t bad = compare_forward(&b, what);
        CHECK(bad == 0, "%s: %lld elements differ", what, (long long)bad);
        tbe_batch_free(&b);
      }
}

/* One D, many bags: long runs of the lookahead across bags, chunks and features. */
static void test_pooled_many_bags(void)
{
  static const int32_t D[] = {128, 128, 24};
  for (int wd = 0; wd < 3; wd++) {
    rng = 2000 + (uint64_t)wd;
    tbe_batch b = random_batch(D, 3, (tbe_dtype)wd, TBE_FP32, TBE_I64, TBE_POOL_SUM, 0, 300, 40);
    int64_t bad = compare_forward(&b, "many bags");
    CHECK(bad == 0, "many bags w%s: %lld elements differ", tbe_dtype_name(b.wdtype),
          (long long)bad);
    tbe_batch_free(&b);
  }
}

static void test_none(void)
{
  for (int32_t D = 1; D <= 130; D += 43)
    for (int wd = 0; wd < 3; wd++)
      for (int od = 0; od < 3; od++) {
        int32_t Ds[2] = {D, D};
        rng = 3000 + (uint64_t)(D * 9 + wd * 3 + od);
        tbe_batch b = random_batch(Ds, 2, (tbe_dtype)wd, (tbe_dtype)od, TBE_I32, TBE_POOL_NONE, 0,
                                   5, 12);
        int64_t bad = compare_forward(&b, "none");
        CHECK(bad == 0, "none D %d w%s out%s: %lld elements differ", D, tbe_dtype_name(b.wdtype),
              tbe_dtype_name(b.out_dtype), (long long)bad);
        tbe_batch_free(&b);
      }
}

int main(void)
{
  test_pooled_mixed_D();
  test_pooled_many_bags();
  test_none();
  return TEST_MAIN_RESULT();
}
