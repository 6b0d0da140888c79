/* clones.h: REF_CLONES, which builds a hot loop twice (x86-64 with AVX2 and FMA, and the
 * baseline) and picks one at load time. Not a licence to change numerics: both clones run the
 * same IEEE operations (fmaf, +, *), so their bits are identical.
 */
#ifndef REF_CLONES_H
#define REF_CLONES_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define REF_CLONES __attribute__((target_clones("arch=haswell", "default")))
#else
#define REF_CLONES
#endif

#endif
