/* prng.h: the counter-based random numbers of the input generator: a splitmix64 hash of
 * (seed, stream, counter). Not Philox (ref/, stochastic rounding) and never rand().
 *
 * Invariant: a draw depends only on its key and counter, never on earlier draws, so any element
 * of a generated batch can be computed alone, in any order, by any thread. prng_key() turns
 * (seed, stream) into a key; prng_at(key, i) is the i-th output of splitmix64 started at key.
 * Every function here is integer arithmetic, so the bits are the same on every machine.
 */
#ifndef HARNESS_PRNG_H
#define HARNESS_PRNG_H

#include <stdint.h>

#define PRNG_GAMMA UINT64_C(0x9E3779B97F4A7C15)

/* The splitmix64 finaliser: a bijection of 64-bit words with good avalanche. */
static inline uint64_t prng_mix(uint64_t z)
{
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* The key of one stream of one seed. Different (seed, stream) pairs give unrelated keys. */
uint64_t prng_key(uint64_t seed, uint64_t stream);

/* Output number `counter` of the stream `key`. */
static inline uint64_t prng_at(uint64_t key, uint64_t counter)
{
  return prng_mix(key + (counter + 1) * PRNG_GAMMA);
}

/* A uniform integer in [0, n) from the 64-bit draw x (multiply-high: bias below n / 2^64). */
static inline uint64_t prng_below(uint64_t x, uint64_t n)
{
  return (uint64_t)(((unsigned __int128)x * n) >> 64);
}

/* A uniform double in [0, 1) with 53 random bits. */
static inline double prng_unit(uint64_t x) { return (double)(x >> 11) * 0x1p-53; }

#endif
