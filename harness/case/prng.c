/* prng.c: stream keys of the counter-based generator (prng.h). Not a sequential generator:
 * there is no state to advance, only keys and counters.
 */
#include "prng.h"

uint64_t prng_key(uint64_t seed, uint64_t stream)
{
  /* two rounds of mixing so that neighbouring seeds and neighbouring streams share nothing */
  return prng_mix(prng_mix(seed + PRNG_GAMMA) ^ prng_mix(~stream * PRNG_GAMMA));
}
