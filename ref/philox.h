/* philox.h: the Philox4x32-10 counter-based generator (Salmon et al., "Parallel random numbers:
 * as easy as 1, 2, 3", SC'11; Random123's philox4x32_10), the random source of stochastic rounding.
 * Not the input generator's PRNG (harness/case/prng.h), which never feeds the numerics of an engine.
 *
 * A pure function of (counter, key): integer multiply-high, xor and add only, so the same bits
 * on every machine and on the GPU (TBE_SEMANTICS.md section 5 keys it per weight element).
 */
#ifndef REF_PHILOX_H
#define REF_PHILOX_H

#include <stdint.h>

/* out = philox4x32_10(ctr, key): ten rounds with multipliers 0xD2511F53, 0xCD9E8D57 and Weyl
 * key increments 0x9E3779B9, 0xBB67AE85, the key bumped before rounds 2..10. */
void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

#endif
