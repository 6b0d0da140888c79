/* speed.h: knobs of the reference's speed that no output bit depends on: REF_CLONES builds a hot
 * loop twice (x86-64-v3: AVX2, FMA, F16C; and the baseline) and picks one at load time; REF_PAR_MIN
 * is the work below which a loop runs on one thread. Not a licence to change numerics: both
 * clones run the same IEEE operations (fmaf, +, *), and the loops they gate are independent.
 */
#ifndef REF_SPEED_H
#define REF_SPEED_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define REF_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define REF_CLONES
#endif

/* Work items (elements, bags, entries, runs) under which starting threads costs more than it
 * saves; a waiting OpenMP thread spins, so tiny parallel regions are slow on a busy machine. */
#define REF_PAR_MIN 4096

#endif
