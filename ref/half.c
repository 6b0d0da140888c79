/* half.c: fp16/bf16 <-> fp32/fp64 conversions, round-to-nearest-even, one rounding.
 * Not the fast fp16 loads of the forward loop (forward.c widens with F16C where it can).
 *
 * Narrowing works on the double's bits: the 53-bit significand is shifted right to the target's
 * precision (more for targets' subnormals) and rounded to nearest, ties to even. Adding the
 * rounded significand to the biased exponent lets a carry roll into the exponent, up to Inf.
 */
#include "half.h"

#include <string.h>

static float bits_to_float(uint32_t u)
{
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float ref_half_to_float(uint16_t h)
{
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  if (exp == 0x1F) /* Inf, or NaN: payload kept in the top bits, quieted like F16C and GCC do */
    return bits_to_float(sign | 0x7F800000u | (man << 13) | (man ? 0x400000u : 0u));
  if (exp == 0) {
    /* zero or subnormal: man * 2^-24, exact in fp32 */
    float v = (float)man * 0x1p-24f;
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

/* The plain shift every bf16 implementation uses: a signalling bf16 NaN stays signalling. */
float ref_bf16_to_float(uint16_t h) { return bits_to_float((uint32_t)h << 16); }

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
