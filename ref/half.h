/* half.h: fp16 and bf16 conversions with round-to-nearest-even, the only place the reference
 * turns wider floats into 16-bit ones. Not a general float library: no arithmetic in 16 bits.
 *
 * Every narrowing rounds once from its argument's exact value (a double narrows to fp16 in one
 * step, never through fp32). NaN stays NaN (quiet, sign kept); overflow gives Inf.
 */
#ifndef REF_HALF_H
#define REF_HALF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

float ref_half_to_float(uint16_t h);
float ref_bf16_to_float(uint16_t h);
uint16_t ref_double_to_half(double x);
uint16_t ref_double_to_bf16(double x);
/* A float widens to double exactly, so these round once too. */
static inline uint16_t ref_float_to_half(float f) { return ref_double_to_half((double)f); }
static inline uint16_t ref_float_to_bf16(float f) { return ref_double_to_bf16((double)f); }

/* n values at once, bit for bit the functions above (NaN included), F16C and AVX2 where the CPU
 * has them: the fp16 rows of the backward's loads and write-backs. */
void ref_half_to_float_row(const uint16_t *h, int64_t n, float *f);
void ref_bf16_to_float_row(const uint16_t *h, int64_t n, float *f);
void ref_float_to_half_row(const float *f, int64_t n, uint16_t *h);
void ref_float_to_bf16_row(const float *f, int64_t n, uint16_t *h);

#ifdef __cplusplus
}
#endif

#endif
