/* half.c: fp16/bf16 <-> fp32/fp64 conversions, round-to-nearest-even, one rounding.
 * Not the fast fp16 loads of the forward loop (forward.c widens with F16C where it can).
 *
 * Narrowing works on the double's bits: the 53-bit significand is shifted right to the target's
 * precision (more for targets' subnormals) and rounded to nearest, ties to even. Adding the
 * rounded significand to the biased exponent lets a carry roll into the exponent, up to Inf.
 *
 * The row functions are the same conversions for speed: fp16 through F16C (vcvtph2ps is exact;
 * vcvtps2ph with round-to-nearest-even is the IEEE conversion, and NaN lanes are rewritten to
 * the quiet NaN narrow_double gives), bf16 by integer rounding of the fp32 bits (add 0x7FFF plus
 * the lowest kept bit, drop 16 bits: ties to even, carries into the exponent up to Inf).
 */
#include "bits.h"
#include "half.h"
#include "speed.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HALF_F16C 1
#endif

float ref_half_to_float(uint16_t h)
{
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  if (exp == 0x1F) /* Inf, or NaN: payload kept in the top bits, quieted like F16C and GCC do */
    return ref_bits_f32(sign | 0x7F800000u | (man << 13) | (man ? 0x400000u : 0u));
  if (exp == 0) {
    /* zero or subnormal: man * 2^-24, exact in fp32 */
    float v = (float)man * 0x1p-24f;
    return sign ? -v : v;
  }
  return ref_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* The plain shift every bf16 implementation uses: a signalling bf16 NaN stays signalling. */
float ref_bf16_to_float(uint16_t h) { return ref_bits_f32((uint32_t)h << 16); }

/* Round |x| (finite, nonzero, given by its double bits) to a format with `man_bits` fraction bits
 * and exponent bias `bias` with `exp_bits` exponent bits. Returns the magnitude bits. */
static uint16_t narrow(uint64_t dbits, int man_bits, int exp_bits, int bias)
{
  int dexp = (int)((dbits >> 52) & 0x7FF);
  if (dexp == 0) /* fp64 subnormal: far below half the smallest fp16/bf16 subnormal */
    return 0;
  int e = dexp - 1023;                                  /* |x| = M * 2^(e-52) */
  uint64_t M = (dbits & 0xFFFFFFFFFFFFFull) | (1ull << 52);
  int emin = 1 - bias;
  int max_field = (1 << exp_bits) - 1;
  if (e + bias >= max_field) /* at or above 2^(emax+1): Inf */
    return (uint16_t)(max_field << man_bits);
  int shift = 52 - man_bits + (e < emin ? emin - e : 0);
  if (shift >= 54) /* M / 2^shift < 1/2: rounds to zero */
    return 0;
  uint64_t q = M >> shift;
  uint64_t rem = M & ((1ull << shift) - 1);
  uint64_t half = 1ull << (shift - 1);
#if defined(TBE_FAULT_FP16_TRUNCATE) /* planted: fp16 narrowing drops the rest, no rounding */
  rem = man_bits == 10 ? 0 : rem;
#endif
  if (rem > half || (rem == half && (q & 1)))
    q++;
  if (e < emin) /* subnormal; q == 2^man_bits encodes the smallest normal */
    return (uint16_t)q;
  /* q holds the implicit bit, which adds one to the biased exponent field */
  return (uint16_t)(((uint64_t)(e + bias - 1) << man_bits) + q);
}

static uint16_t narrow_double(double x, int man_bits, int exp_bits, int bias)
{
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  uint16_t sign = (uint16_t)((b >> 63) << 15);
  uint64_t mag = b & 0x7FFFFFFFFFFFFFFFull;
  uint16_t inf = (uint16_t)(((1u << exp_bits) - 1u) << man_bits);
  if (mag > 0x7FF0000000000000ull) /* NaN: quiet, sign kept */
    return (uint16_t)(sign | inf | (1u << (man_bits - 1)));
  if (mag == 0x7FF0000000000000ull)
    return (uint16_t)(sign | inf);
  if (mag == 0)
    return sign;
  return (uint16_t)(sign | narrow(mag, man_bits, exp_bits, bias));
}

uint16_t ref_double_to_half(double x) { return narrow_double(x, 10, 5, 15); }
uint16_t ref_double_to_bf16(double x) { return narrow_double(x, 7, 8, 127); }

void ref_bf16_to_float_row(const uint16_t *h, int64_t n, float *f)
{
  for (int64_t i = 0; i < n; i++)
    f[i] = ref_bf16_to_float(h[i]);
}

void ref_float_to_bf16_row(const float *f, int64_t n, uint16_t *h)
{
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &f[i], sizeof u);
    h[i] = (u & 0x7FFFFFFFu) > 0x7F800000u ? (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u)
                                           : (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
}

#ifdef HALF_F16C
__attribute__((target("avx2,f16c"))) static void half_to_float_f16c(const uint16_t *h,
                                                                      int64_t n, float *f)
{
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
  for (; i < n; i++)
    f[i] = ref_half_to_float(h[i]);
}

__attribute__((target("avx2,f16c"))) static void float_to_half_f16c(const float *f, int64_t n,
                                                                      uint16_t *h)
{
  const __m128i sign = _mm_set1_epi16((short)0x8000), qnan = _mm_set1_epi16(0x7E00);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(f + i);
    __m128i r = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan32),
                                    _mm256_extracti128_si256(nan32, 1));
    __m128i fixed = _mm_or_si128(_mm_and_si128(r, sign), qnan);
    _mm_storeu_si128((__m128i *)(h + i), _mm_blendv_epi8(r, fixed, nan16));
  }
  for (; i < n; i++)
    h[i] = ref_float_to_half(f[i]);
}

static int half_has_f16c(void)
{
  return ref_cpu_avx2_fma_f16c();
}
#endif

void ref_half_to_float_row(const uint16_t *h, int64_t n, float *f)
{
#ifdef HALF_F16C
  if (half_has_f16c()) {
    half_to_float_f16c(h, n, f);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++)
    f[i] = ref_half_to_float(h[i]);
}

void ref_float_to_half_row(const float *f, int64_t n, uint16_t *h)
{
#ifdef HALF_F16C
  if (half_has_f16c()) {
    float_to_half_f16c(f, n, h);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++)
    h[i] = ref_float_to_half(f[i]);
}
