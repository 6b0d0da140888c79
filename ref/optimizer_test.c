/* optimizer_test.c: section 5 of TBE_SEMANTICS.md one formula at a time: the 32-lane order
 * (against a recursive statement of the butterfly), SGD's fma, Adagrad with NONE / L2 / DECOUPLE,
 * and stochastic rounding: exact on representable values, the threshold to the draw, overflow,
 * and unbiased over 10^6 Philox draws (fp16 normal and subnormal, bf16 normal and subnormal).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "optimizer.h"
#include "philox.h"
#include "test_util.h"

/* Lane l's sequential fma chain over d = l, l+32, ... */
static float lane_chain(const float *a, const float *b, int32_t D, int l)
{
  float s = 0.0f;
  for (int32_t d = l; d < D; d += 32)
    s = fmaf(a[d], b[d], s);
  return s;
}

/* The value at lane l after the butterfly stages o = 16, 8, ... down to `o` (recursive form:
 * V_o(l) = V_2o(l) + V_2o(l xor o), V_32(l) = lane l's chain). */
static float butterfly(const float *a, const float *b, int32_t D, int l, int o)
{
  if (o == 32)
    return lane_chain(a, b, D, l);
  return butterfly(a, b, D, l, o * 2) + butterfly(a, b, D, l ^ o, o * 2);
}

static float frand(uint32_t *x)
{
  *x = *x * 1664525u + 1013904223u;
  return ((float)(*x >> 8) / 16777216.0f - 0.5f) * ldexpf(1.0f, (int)(*x % 17) - 8);
}

static void test_lane_dot(void)
{
  static float a[2048], b[2048];
  uint32_t x = 7;
  int differs = 0;
  const int32_t Ds[] = {1, 2, 31, 32, 33, 64, 100, 128, 2048};
  for (size_t k = 0; k < sizeof Ds / sizeof Ds[0]; k++) {
    int32_t D = Ds[k];
    for (int rep = 0; rep < 20; rep++) {
      float seq = 0.0f;
      for (int32_t d = 0; d < D; d++) {
        a[d] = frand(&x);
        b[d] = frand(&x);
        seq = fmaf(a[d], b[d], seq);
      }
      float got = ref_lane_dot(a, b, D), want = butterfly(a, b, D, 0, 1);
      CHECK(memcmp(&got, &want, 4) == 0, "D=%d: lane dot %a, butterfly %a", D, (double)got,
            (double)want);
      differs += got != seq;
    }
  }
  CHECK(differs > 20, "the lane order matched a plain sequential sum %d times of 180: the "
        "test data does not tell the orders apart", 180 - differs);
}

static ref_opt_config opt(ref_opt_kind k, ref_wd_mode wd, float lr, float eps, float lambda)
{
  ref_opt_config o;
  memset(&o, 0, sizeof o);
  o.kind = k;
  o.wd = wd;
  o.lr = lr;
  o.eps = eps;
  o.lambda = lambda;
  return o;
}

static void test_sgd(void)
{
  ref_opt_config o = opt(REF_OPT_SGD, REF_WD_NONE, 0.1f, 0, 0);
  /* w[0] = fl(0.1 * 3): the fused update leaves the product's rounding error, mul + add 0 */
  float g[3] = {3.0f, -1.0f / 3.0f, 1e-3f}, w[3] = {0.1f * 3.0f, 0.5f, -2.0f}, m = 5.0f;
  float want[3];
  int fused = 0;
  for (int d = 0; d < 3; d++) {
    want[d] = fmaf(-0.1f, g[d], w[d]);
    fused += want[d] != w[d] - 0.1f * g[d];
  }
  ref_opt_update_row(&o, 3, g, w, &m);
  for (int d = 0; d < 3; d++)
    CHECK(w[d] == want[d], "sgd d=%d: %a, want %a", d, (double)w[d], (double)want[d]);
  CHECK(m == 5.0f, "sgd touched the momentum");
  CHECK(fused > 0, "test data does not distinguish fma from mul + add");
}

static void test_adagrad(void)
{
  /* D = 1, lr 1, eps 0, no decay: s = 4, m = 0 + 4, mu = 1/2, w = 5 - 1/2 * 2 */
  ref_opt_config o = opt(REF_OPT_ROWWISE_ADAGRAD, REF_WD_NONE, 1.0f, 0.0f, 0.0f);
  float g = 2.0f, w = 5.0f, m = 0.0f;
  ref_opt_update_row(&o, 1, &g, &w, &m);
  CHECK(m == 4.0f && w == 4.0f, "adagrad: m %g w %g, want 4 4", (double)m, (double)w);

  /* D = 3 with every step rounding, each mode against the formulas spelled out */
  const float g3[3] = {0.3f, -1.7f, 2.9f}, w3[3] = {1.1f, -0.7f, 0.2f};
  const float lr = 0.05f, eps = 1e-3f, lambda = 0.25f, m0 = 0.7f;
  for (int mode = REF_WD_NONE; mode <= REF_WD_DECOUPLE; mode++) {
    o = opt(REF_OPT_ROWWISE_ADAGRAD, (ref_wd_mode)mode, lr, eps, lambda);
    float gd[3], w1[3], s[32] = {0};
    for (int d = 0; d < 3; d++)
      gd[d] = mode == REF_WD_L2 ? fmaf(lambda, w3[d], g3[d]) : g3[d];
    for (int d = 0; d < 3; d++)
      s[d] = gd[d] * gd[d]; /* lanes 0..2, one term each; fma(x, x, 0) rounds like x * x */
    float sum = ((s[0] + s[2]) + s[1]); /* the butterfly reduces lanes 0, 1, 2 this way */
    float mw = m0 + sum / 3.0f;
    float mu = lr / (sqrtf(mw) + eps);
    float c = mode == REF_WD_L2 ? fmaf(-mu, lambda, 1.0f)
              : mode == REF_WD_DECOUPLE ? fmaf(-lr, lambda, 1.0f) : 1.0f;
    for (int d = 0; d < 3; d++)
      w1[d] = fmaf(-mu, g3[d], c == 1.0f ? w3[d] : c * w3[d]);
    float wg[3] = {w3[0], w3[1], w3[2]}, mg = m0;
    ref_opt_update_row(&o, 3, g3, wg, &mg);
    CHECK(mg == mw, "%s: momentum %a, want %a", ref_wd_name(o.wd), (double)mg, (double)mw);
    for (int d = 0; d < 3; d++)
      CHECK(wg[d] == w1[d], "%s d=%d: %a, want %a", ref_wd_name(o.wd), d, (double)wg[d],
            (double)w1[d]);
  }
}

static uint16_t narrow(float x, tbe_dtype t)
{
  return t == TBE_FP16 ? ref_float_to_half(x) : ref_float_to_bf16(x);
}

static float widen(uint16_t h, tbe_dtype t)
{
  return t == TBE_FP16 ? ref_half_to_float(h) : ref_bf16_to_float(h);
}

static void test_sr_representable(void)
{
  const uint32_t us[] = {0, 1, 0x80000000u, 0xFFFFFFFFu};
  for (int k = 0; k < 2; k++) {
    tbe_dtype t = k ? TBE_BF16 : TBE_FP16;
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
      float x = widen((uint16_t)h, t);
      if (!isfinite(x))
        continue;
      for (int i = 0; i < 4; i++)
        bad += ref_sr_round(x, t, us[i]) != h;
    }
    CHECK(bad == 0, "%s: %d representable values moved under stochastic rounding",
          tbe_dtype_name(t), bad);
  }
}

static void test_sr_threshold(void)
{
  /* 1 + a quarter of an fp16 ulp (2^-10): b = 1 + 2^-10 exactly when u < 2^30 */
  float x = 1.0f + 0x1p-12f;
  CHECK(ref_sr_round(x, TBE_FP16, 0x3FFFFFFFu) == 0x3C01, "u just below the threshold");
  CHECK(ref_sr_round(x, TBE_FP16, 0x40000000u) == 0x3C00, "u at the threshold");
  CHECK(ref_sr_round(-x, TBE_FP16, 0) == 0xBC01, "negative values step away from zero");
  /* bf16: the threshold is the dropped 16 bits, shifted up */
  float y;
  uint32_t yb = 0x3F80ABCDu;
  memcpy(&y, &yb, 4);
  CHECK(ref_sr_round(y, TBE_BF16, 0xABCD0000u - 1) == 0x3F81, "bf16 below the threshold");
  CHECK(ref_sr_round(y, TBE_BF16, 0xABCD0000u) == 0x3F80, "bf16 at the threshold");
  /* below the smallest fp16 subnormal: 0 or 2^-24, sign kept */
  CHECK(ref_sr_round(0x1p-26f, TBE_FP16, 0x3FFFFFFFu) == 0x0001, "tiny up");
  CHECK(ref_sr_round(0x1p-26f, TBE_FP16, 0x40000000u) == 0x0000, "tiny down");
  CHECK(ref_sr_round(-0x1p-26f, TBE_FP16, 0x40000000u) == 0x8000, "tiny negative keeps -0");
  /* across a binade: just below 2.0 rounds up to 2.0 with RNE but truncates to 2 - 2^-10 */
  CHECK(ref_sr_round(2.0f - 0x1p-13f, TBE_FP16, 0xFFFFFFFFu) == 0x3FFF, "binade edge down");
  CHECK(ref_sr_round(2.0f - 0x1p-13f, TBE_FP16, 0) == 0x4000, "binade edge up");
  /* past the largest finite fp16 (65504, spacing 32): Inf with probability (x - 65504) / 32 */
  CHECK(ref_sr_round(65519.0f, TBE_FP16, 0x77FFFFFFu) == 0x7C00, "overflow up");
  CHECK(ref_sr_round(65519.0f, TBE_FP16, 0x78000000u) == 0x7BFF, "overflow down");
  CHECK(ref_sr_round(70000.0f, TBE_FP16, 0xFFFFFFFFu) == 0x7C00, "past the top: always Inf");
  CHECK(ref_sr_round(-70000.0f, TBE_FP16, 0xFFFFFFFFu) == 0xFC00, "-Inf");
  CHECK(ref_sr_round(INFINITY, TBE_BF16, 0) == 0x7F80, "Inf stays Inf");
  CHECK((ref_sr_round(NAN, TBE_FP16, 0) & 0x7C00) == 0x7C00 &&
            (ref_sr_round(NAN, TBE_FP16, 0) & 0x3FF) != 0, "NaN stays NaN");
}

/* Mean of 10^6 stochastic roundings of x, each with its own Philox draw. */
static void check_unbiased(float x, tbe_dtype t)
{
  ref_opt_config o = opt(REF_OPT_SGD, REF_WD_NONE, 0, 0, 0);
  o.sr = 1;
  o.seed = 0x123456789ABCDEFull;
  o.step = 3;
  const int n = 1000000;
  uint16_t a = ref_sr_round(x, t, 0xFFFFFFFFu), b = ref_sr_round(x, t, 0);
  double lo = widen(a, t), hi = widen(b, t), ups = 0;
  int other = 0;
  for (int i = 0; i < n; i++) {
    uint16_t h = ref_sr_round(x, t, ref_sr_draw(&o, i % 1000, (uint64_t)(i / 1000)));
    ups += h == b;
    other += h != a && h != b;
  }
  double frac = ((double)x - lo) / (hi - lo), mean = lo + (hi - lo) * ups / n;
  double sigma = fabs(hi - lo) * sqrt(frac * (1 - frac) / n);
  CHECK(other == 0, "%s x=%a: %d results outside {%a, %a}", tbe_dtype_name(t), (double)x, other,
        lo, hi);
  CHECK(fabs(mean - (double)x) <= 5 * sigma, "%s x=%a: mean of %d roundings %a is %.2f sigma "
        "from x (frac %.4f, rounded up %.0f times)", tbe_dtype_name(t), (double)x, n, mean,
        fabs(mean - (double)x) / sigma, frac, ups);
}

static void test_sr_unbiased(void)
{
  check_unbiased(1.0f + 0x1p-10f / 3.0f, TBE_FP16);     /* normal, frac 1/3 */
  check_unbiased(-3.14159274f, TBE_FP16);                /* negative normal */
  check_unbiased(0x1p-24f * 2.75f, TBE_FP16);            /* subnormal, frac 3/4 */
  check_unbiased(0x1p-24f * 0.1f, TBE_FP16);             /* below the smallest subnormal */
  check_unbiased(1.0f + 0x1p-7f * 0.6f, TBE_BF16);       /* bf16 normal */
  check_unbiased(0x1p-133f * 1.3f, TBE_BF16);            /* bf16 subnormal */
  check_unbiased(-0x1p-130f * 1.77f, TBE_BF16);          /* negative bf16 subnormal */
}

static void test_store_row(void)
{
  ref_opt_config o = opt(REF_OPT_SGD, REF_WD_NONE, 0, 0, 0);
  float w[64];
  for (int d = 0; d < 64; d++)
    w[d] = 1.0f + (float)d * 0x1p-14f + 0x1p-16f;
  uint16_t rne[64], s1[64], s2[64], s3[64], s4[64];
  ref_store_row(&o, TBE_FP16, w, 64, 5, rne);
  for (int d = 0; d < 64; d++)
    CHECK(rne[d] == narrow(w[d], TBE_FP16), "RNE d=%d", d);
  o.sr = 1;
  ref_store_row(&o, TBE_FP16, w, 64, 5, s1);
  o.step = 1;
  ref_store_row(&o, TBE_FP16, w, 64, 5, s2);
  o.step = 0;
  ref_store_row(&o, TBE_FP16, w, 64, 5 + (UINT64_C(1) << 32), s3);
  o.seed = UINT64_C(1) << 32;
  ref_store_row(&o, TBE_FP16, w, 64, 5, s4);
  CHECK(memcmp(s1, s2, sizeof s1) != 0, "the step does not reach the draws");
  CHECK(memcmp(s1, s3, sizeof s1) != 0, "the row's high word does not reach the draws");
  CHECK(memcmp(s1, s4, sizeof s1) != 0, "the seed's high word does not reach the draws");
  o.seed = 0;
  for (int d = 0; d < 64; d++) {
    const uint32_t ctr[4] = {(uint32_t)d, 5, 0, 0}, key[2] = {0, 0};
    uint32_t out[4];
    ref_philox4x32_10(ctr, key, out);
    CHECK(s1[d] == ref_sr_round(w[d], TBE_FP16, out[0]), "SR d=%d: counter (col, row, 0, step)",
          d);
  }
  float f[4] = {1.5f, -2.25f, 1e-40f, 3.0f}, back[4];
  ref_store_row(&o, TBE_FP32, f, 4, 0, back);
  CHECK(memcmp(f, back, sizeof f) == 0, "FP32 weights are stored as computed, even with sr=1");
}

int main(void)
{
  test_lane_dot();
  test_sgd();
  test_adagrad();
  test_sr_representable();
  test_sr_threshold();
  test_sr_unbiased();
  test_store_row();
  return TEST_MAIN_RESULT();
}
