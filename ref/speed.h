/* speed.h: knobs of the reference's speed that no output bit depends on: REF_CLONES builds a hot
 * loop twice (x86-64-v3: AVX2, FMA, F16C; and the baseline) and picks one at load time;
 * REF_PAR_MIN is the work below which a loop runs on one thread; ref_alloc_big asks for huge
 * pages. Not a licence to change numerics: both clones run the same IEEE operations (fmaf, +, *),
 * and the loops they gate are independent.
 */
#ifndef REF_SPEED_H
#define REF_SPEED_H

#include <stdlib.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define REF_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define REF_CLONES
#endif

/* Work items (elements, bags, entries, runs) under which starting threads costs more than it
 * saves; a waiting OpenMP thread spins, so tiny parallel regions are slow on a busy machine. */
#define REF_PAR_MIN 4096

#define REF_HUGE_PAGE ((size_t)2 << 20)

/* malloc for arrays read at random (gradient rows, the sort's buckets): aligned to 2 MiB and
 * marked for transparent huge pages, so random rows do not each cost a TLB miss. Free with
 * free(). NULL when it cannot be allocated. */
static inline void *ref_alloc_big(size_t bytes)
{
  if (bytes > SIZE_MAX - REF_HUGE_PAGE)
    return NULL;
  size_t n = (bytes + REF_HUGE_PAGE - 1) / REF_HUGE_PAGE * REF_HUGE_PAGE;
  void *p = aligned_alloc(REF_HUGE_PAGE, n ? n : REF_HUGE_PAGE);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p)
    madvise(p, n ? n : REF_HUGE_PAGE, MADV_HUGEPAGE);
#endif
  return p;
}

#endif
