/* bits.h: the bit patterns of floats and back, through memcpy (no aliasing tricks). Shared by
 * the rounding code, its tests and the generator's math. Not a place for any arithmetic.
 */
#ifndef REF_BITS_H
#define REF_BITS_H

#include <stdint.h>
#include <string.h>

static inline uint32_t ref_f32_bits(float f)
{
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float ref_bits_f32(uint32_t u)
{
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint64_t ref_f64_bits(double d)
{
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

static inline double ref_bits_f64(uint64_t u)
{
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

#endif
