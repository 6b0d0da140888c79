/* backward_small_test.c: the small-table backward's model (bwd.small_tc) pinned on hand-made
 * bags where other orders give other bits, its fallback rules, and its bound on random batches.
 * Not the GPU test (gpu/backward_test.c), which holds the kernel to this model.
 */
#include <math.h>
#include <string.h>

#include "backward_impl.h"
#include "backward_small.h"
#include "bits.h"
#include "half.h"
#include "test_batch.h"
#include "test_util.h"

/* One table of E rows and D = 64 columns, one feature of B bags; bag q holds `per_bag` lookups
 * of row 0 and grad_output row q is gval(q) in every column. */
typedef struct {
  tbe_batch b;
  tbe_layout l;
  float *go;
} one_table;

static void one_table_make(one_table *o, int64_t E, int32_t B, int per_bag, double (*gval)(int))
{
  static int64_t idx[1 << 16], off[(1 << 12) + 1];
  const int32_t D = 64;
  for (int32_t q = 0; q <= B; q++)
    off[q] = (int64_t)q * per_bag;
  for (int64_t p = 0; p < (int64_t)B * per_bag; p++)
    idx[p] = 0;
  tb_spec s = {.num_tables = 1, .E = &E, .D = &D, .wdtype = TBE_FP16, .T = 1, .B = B,
               .itype = TBE_I64, .N = (int64_t)B * per_bag, .indices = idx, .offsets = off,
               .pool = TBE_POOL_SUM, .out_dtype = TBE_FP32};
  o->b = tb_build(&s);
  tbe_layout_init(&o->l, &o->b);
  o->go = malloc(sizeof(float) * (size_t)o->l.out_elems);
  for (int32_t q = 0; q < B; q++)
    for (int32_t d = 0; d < D; d++)
      o->go[(int64_t)q * D + d] = (float)gval(q);
}

static void one_table_free(one_table *o)
{
  free(o->go);
  tbe_layout_free(&o->l);
  tbe_batch_free(&o->b);
}

/* Row 0, column 0's gradient by the model. */
static float model_grad(const one_table *o)
{
  float grad[REF_SMALL_MAX_E * 128];
  unsigned char touched[REF_SMALL_MAX_E];
  ref_small_tc_row_grads(&o->b, &o->l, o->go, 0, grad, touched);
  CHECK(touched[0] == 1 && (o->b.E[0] < 2 || touched[1] == 0), "touched rows: row 0 only\n");
  return grad[0];
}

/* Other orders on the same bags (each bag one count of row 0, value g(q)): hi and lo into one
 * accumulator per k-step (one = 1), or two chains over all bags without segments (one = 0). */
static float other_order(int32_t B, double (*gval)(int), int one)
{
  float h = 0.0f, lo = 0.0f;
  for (int32_t k0 = 0; k0 < B; k0 += REF_SMALL_K) {
    uint16_t a[REF_SMALL_K] = {0}, bh[REF_SMALL_K] = {0}, bl[REF_SMALL_K] = {0};
    for (int k = 0; k < REF_SMALL_K && k0 + k < B; k++) {
      float x = (float)gval(k0 + k);
      a[k] = ref_float_to_half(1.0f);
      bh[k] = ref_float_to_half(x);
      bl[k] = ref_float_to_half(x - ref_half_to_float(bh[k]));
    }
    h = ref_mma_f16_f32(a, bh, h);
    if (one)
      h = ref_mma_f16_f32(a, bl, h);
    else
      lo = ref_mma_f16_f32(a, bl, lo);
  }
  return h + lo;
}

static double g_split(int q)
{
  (void)q;
  return 1024.0 + 0x1p-12; /* hi = 1024, lo = 2^-12 */
}

static double g_segments(int q) { return q < REF_SMALL_SEG ? 1.0 : 0x1p-18; }

static void test_two_chains(void)
{
  /* 32 bags of 1024 + 2^-12: the hi chain reaches 2^14 after one k-step, so in one accumulator
   * the next lo products (2^-12 < 2^(14 - 25)) truncate to 0; in their own chain they keep every
   * bit: 32768 + 2^-7, the exact sum */
  one_table o;
  one_table_make(&o, 2, 32, 1, g_split);
  const float m = model_grad(&o), one = other_order(32, g_split, 1);
  CHECK(ref_f32_bits(m) == ref_f32_bits(32768.0f + 0x1p-7f), "two chains: model %a, want %a\n",
        (double)m, 32768.0 + 0x1p-7);
  CHECK(ref_f32_bits(one) != ref_f32_bits(m), "one accumulator gives the model's bits (%a)\n",
        (double)one);
  one_table_free(&o);
}

static void test_segments(void)
{
  /* 256 bags of 1 (segment 0: P = 256), then 16 bags of 2^-18 (an fp16 subnormal, exponent -14
   * in the alignment): continuing the chain past 256 truncates each product to a multiple of
   * 2^(8 - 25) = 0; a new segment from +0 sums them exactly (2^-14) and the fp32 add keeps it */
  one_table o;
  one_table_make(&o, 1, REF_SMALL_SEG + 16, 1, g_segments);
  const float m = model_grad(&o), chain = other_order(REF_SMALL_SEG + 16, g_segments, 0);
  CHECK(ref_f32_bits(m) == ref_f32_bits(256.0f + 0x1p-14f), "segments: model %a, want %a\n",
        (double)m, 256.0 + 0x1p-14);
  CHECK(ref_f32_bits(chain) == ref_f32_bits(256.0f), "one chain over all bags: %a, want 256\n",
        (double)chain);
  one_table_free(&o);
}

static double g_big(int q) { return q == 5 ? 70000.0 : 1.0; }
static double g_nan(int q) { return q == 3 ? NAN : 1.0; }
static double g_one(int q)
{
  (void)q;
  return 1.0;
}

/* ref_backward_small on o: returns taken[0] and checks a table not taken keeps its bits. */
static int run_taken(one_table *o)
{
  ref_bwd_config cfg;
  ref_bwd_config_default(&cfg);
  cfg.opt.kind = REF_OPT_ROWWISE_ADAGRAD;
  const unsigned char tables[] = {1};
  unsigned char taken[1] = {9};
  float m[64] = {0};
  uint16_t before[64];
  memcpy(before, o->b.weights, sizeof before);
  tbe_status st = ref_backward_small(&o->b, &o->l, &cfg, o->go, tables, m, taken);
  CHECK(st.code == TBE_OK, "ref_backward_small: %s\n", st.message);
  if (!taken[0])
    CHECK(!memcmp(before, o->b.weights, sizeof before) && m[0] == 0.0f,
          "a table not taken was updated\n");
  return taken[0];
}

static void test_fallback(void)
{
  one_table o;
  one_table_make(&o, 4, 40, 2, g_one);
  CHECK(run_taken(&o) == 1, "a plain table is taken\n");
  one_table_free(&o);
  one_table_make(&o, 4, 40, 2, g_big); /* fp16(70000) = Inf */
  CHECK(run_taken(&o) == 0, "|G| > 65504 is not taken\n");
  one_table_free(&o);
  one_table_make(&o, 4, 40, 2, g_nan);
  CHECK(run_taken(&o) == 0, "NaN in G is not taken\n");
  one_table_free(&o);
  one_table_make(&o, 4, 2, REF_SMALL_HIST + 1, g_one); /* L = 257: counts past the histogram */
  CHECK(run_taken(&o) == 0, "L > 256 is not taken\n");
  one_table_free(&o);

  /* only row-wise Adagrad */
  one_table_make(&o, 4, 4, 1, g_one);
  ref_bwd_config cfg;
  ref_bwd_config_default(&cfg);
  cfg.opt.kind = REF_OPT_SGD;
  unsigned char small[] = {1}, tables[1], taken[1];
  ref_small_tc_tables(&o.b, &cfg, small, tables);
  CHECK(tables[0] == 0, "SGD cannot take the path\n");
  float m[4] = {0};
  CHECK(ref_backward_small(&o.b, &o.l, &cfg, o.go, small, m, taken).code == TBE_EINVAL,
        "SGD is refused\n");
  one_table_free(&o);
}

static void test_tables(void)
{
  /* features 0 and 2 share table 0; feature 1 has table 1 alone; table 2 has no feature */
  int64_t E[] = {10, 10, 10};
  int32_t D[] = {64, 64, 64}, map[] = {0, 1, 0};
  int64_t off[] = {0, 0, 0, 0};
  tb_spec s = {.num_tables = 3, .E = E, .D = D, .wdtype = TBE_FP16, .T = 3, .map = map, .B = 1,
               .itype = TBE_I64, .N = 0, .indices = off, .offsets = off, .pool = TBE_POOL_SUM,
               .out_dtype = TBE_FP32};
  tbe_batch b = tb_build(&s);
  ref_bwd_config cfg;
  ref_bwd_config_default(&cfg);
  cfg.opt.kind = REF_OPT_ROWWISE_ADAGRAD;
  unsigned char small[] = {1, 1, 0}, tables[3];
  ref_small_tc_tables(&b, &cfg, small, tables);
  CHECK(!tables[0] && tables[1] && !tables[2],
        "a table with a feature off the small forward path, or none, cannot take it (%d %d %d)\n",
        tables[0], tables[1], tables[2]);
  tbe_batch_free(&b);
}

static double w_table(int32_t j, int64_t row, int32_t d)
{
  return cos((double)(j * 1000 + row * 31 + d)) * 0.25;
}

/* ref_backward_small_call on features of a small table (0) and a large one (1): table 0 as
 * ref_backward_small alone leaves it, table 1 as ref_backward alone. */
static void test_call(void)
{
  int64_t E[] = {20, 300}, idx[64], off[9];
  int32_t D[] = {64, 64};
  for (int p = 0; p < 64; p++)
    idx[p] = (p * 7) % 20;
  for (int i = 0; i <= 8; i++)
    off[i] = i * 8;
  tb_spec s = {.num_tables = 2, .E = E, .D = D, .wdtype = TBE_FP16, .T = 2, .B = 4,
               .itype = TBE_I64, .N = 64, .indices = idx, .offsets = off, .pool = TBE_POOL_SUM,
               .out_dtype = TBE_FP32, .weight_fn = w_table};
  tbe_batch b = tb_build(&s), a = tb_build(&s), c = tb_build(&s);
  tbe_layout l;
  tbe_layout_init(&l, &b);
  float go[4 * 128];
  for (int i = 0; i < 4 * 128; i++)
    go[i] = (float)sin(i * 1.7) * 3.0f;
  ref_bwd_config cfg;
  ref_bwd_config_default(&cfg);
  cfg.opt.kind = REF_OPT_ROWWISE_ADAGRAD;
  const unsigned char tables[] = {1, 0};
  unsigned char taken[2], taken2[2];
  float m[320] = {0}, ma[320] = {0}, mc[320] = {0};
  tbe_status st = ref_backward_small_call(&b, &l, &cfg, go, tables, m, NULL, taken);
  CHECK(st.code == TBE_OK && taken[0] && !taken[1], "the call: %s\n", st.message);
  ref_backward_small(&a, &l, &cfg, go, tables, ma, taken2);
  ref_backward(&c, &l, &cfg, go, mc, NULL, NULL);
  CHECK(!memcmp(b.weights, a.weights, 2 * 20 * 64) && !memcmp(m, ma, sizeof(float) * 20),
        "table 0 is the path's\n");
  CHECK(!memcmp((uint16_t *)b.weights + 20 * 64, (uint16_t *)c.weights + 20 * 64, 2 * 300 * 64) &&
            !memcmp(m + 20, mc + 20, sizeof(float) * 300),
        "table 1 is the normative backward's\n");
  CHECK(memcmp(m, mc, sizeof(float) * 20), "the orders should differ on table 0\n");
  tbe_layout_free(&l);
  tbe_batch_free(&a);
  tbe_batch_free(&b);
  tbe_batch_free(&c);
}

/* A deterministic pseudo-random stream. */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static double uniform(void) { return (double)(next() >> 11) * 0x1p-53; }

static double w_rand(int32_t j, int64_t row, int32_t d)
{
  (void)j;
  return sin((double)(row * 131 + d * 7 + 1)) * 0.5;
}

/* A random batch: two features sharing one table (E rows, D columns), B bags each with 0..maxL
 * lookups (a tenth -1), grad_output spread over many binades (some tiny, so lo is subnormal);
 * the model's stored weights and momentum against the exact twin, element by element. */
static double model_vs_exact(const char *what, int64_t E, int32_t D, int32_t B, int maxL,
                             tbe_pool pool, float clip, ref_wd_mode wd)
{
  static int64_t idx[1 << 18], off[1 << 13];
  int32_t map[] = {0, 0};
  int64_t n = 0;
  off[0] = 0;
  for (int32_t i = 0; i < 2 * B; i++) {
    int L = (int)(next() % (uint64_t)(maxL + 1));
    for (int p = 0; p < L; p++)
      idx[n++] = next() % 10 == 0 ? -1 : (int64_t)(next() % (uint64_t)E);
    off[i + 1] = n;
  }
  tb_spec s = {.num_tables = 1, .E = &E, .D = &D, .wdtype = TBE_FP16, .T = 2, .map = map, .B = B,
               .itype = TBE_I64, .N = n, .indices = idx, .offsets = off, .pool = pool,
               .out_dtype = TBE_FP32, .weight_fn = w_rand};
  tbe_batch b = tb_build(&s);
  tbe_layout l;
  tbe_layout_init(&l, &b);
  float *go = malloc(sizeof(float) * (size_t)l.out_elems);
  for (int64_t i = 0; i < l.out_elems; i++)
    go[i] = (float)((uniform() - 0.5) * ldexp(1.0, (int)(next() % 40) - 30));
  ref_bwd_config cfg;
  ref_bwd_config_default(&cfg);
  cfg.opt.kind = REF_OPT_ROWWISE_ADAGRAD;
  cfg.opt.wd = wd;
  cfg.opt.lambda = wd ? 0.01f : 0.0f;
  cfg.opt.lr = 0.05f;
  cfg.clip = clip;
  float *m0 = malloc(sizeof(float) * (size_t)E), *m = malloc(sizeof(float) * (size_t)E);
  for (int64_t r = 0; r < E; r++)
    m0[r] = m[r] = (float)(uniform() * 1e-3);
  size_t welems = (size_t)(E * D);
  double *we = malloc(sizeof(double) * welems), *wb = malloc(sizeof(double) * welems);
  double *me = malloc(sizeof(double) * (size_t)E), *mb = malloc(sizeof(double) * (size_t)E);
  const unsigned char tables[] = {1};
  unsigned char taken[1];
  tbe_status st = ref_backward_small_exact(&b, &l, &cfg, go, m0, tables, we, wb, me, mb);
  CHECK(st.code == TBE_OK, "%s: exact: %s\n", what, st.message);
  st = ref_backward_small(&b, &l, &cfg, go, tables, m, taken);
  CHECK(st.code == TBE_OK && taken[0], "%s: the table should be taken\n", what);
  double worst = 0;
  int bad = 0;
  for (size_t i = 0; i < welems + (size_t)E; i++) {
    const int isw = i < welems;
    const double got = isw ? ref_half_to_float(((uint16_t *)b.weights)[i]) : m[i - welems];
    const double ex = isw ? we[i] : me[i - welems], bd = isw ? wb[i] : mb[i - welems];
    const double err = fabs(got - ex);
    if (!(err <= bd) && bad++ < 3)
      CHECK(0, "%s: %s %zu: error %g > bound %g\n", what, isw ? "weight" : "momentum", i, err, bd);
    if (bd > 0 && err / bd > worst)
      worst = err / bd;
  }
  printf("%-40s worst error/bound %.3f\n", what, worst);
  free(we);
  free(wb);
  free(me);
  free(mb);
  free(m0);
  free(m);
  free(go);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
  return worst;
}

static void test_bound(void)
{
  model_vs_exact("SUM E=50 D=128, 3 segments", 50, 128, 600, 40, TBE_POOL_SUM, 0.0f, REF_WD_NONE);
  model_vs_exact("MEAN E=64 D=64, clip, L2", 64, 64, 300, 200, TBE_POOL_MEAN, 1e-3f, REF_WD_L2);
  model_vs_exact("SUM E=7 D=72, decouple", 7, 72, 100, 30, TBE_POOL_SUM, 0.0f, REF_WD_DECOUPLE);
}

int main(void)
{
  test_two_chains();
  test_segments();
  test_fallback();
  test_tables();
  test_call();
  test_bound();
  return TEST_MAIN_RESULT();
}
