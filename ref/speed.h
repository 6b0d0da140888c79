/* speed.h: knobs of the reference's speed that no output bit depends on: REF_CLONES builds a hot
 * loop twice (x86-64-v3: AVX2, FMA, F16C; and the baseline) and picks one at load time;
 * ref_cpu_avx2_fma_f16c picks the row kernels, probing the CPU once (never per row); REF_PAR_MIN
 * is the work below which a loop runs on one thread; ref_alloc_big asks for huge pages. Not a
 * licence to change numerics: both clones run the same IEEE operations (fmaf, +, *),
 * and the loops they gate are independent.
 */
#ifndef REF_SPEED_H
#define REF_SPEED_H

#include <stdatomic.h>
#include <stdlib.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define REF_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define REF_CLONES
#endif

/* Does this CPU (and OS) run AVX2 + FMA + F16C code? Read from cpuid and xgetbv, since
 * __builtin_cpu_supports("f16c") is not known to every compiler (clang 14). Slow: on a virtual
 * machine every cpuid traps to the hypervisor; call ref_cpu_avx2_fma_f16c, which asks once. */
static inline int ref_cpu_probe_avx2_fma_f16c(void)
{
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d))
    return 0;
  const unsigned fma = 1u << 12, osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
  if ((c & (fma | osxsave | avx | f16c)) != (fma | osxsave | avx | f16c))
    return 0;
  unsigned xcr0, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0 & 6u) != 6u) /* the OS saves SSE and AVX state */
    return 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
    return 0;
  return (b >> 5) & 1u; /* AVX2 */
#else
  return 0;
#endif
}

/* ref_cpu_probe_avx2_fma_f16c, probed once per translation unit and then read from memory: cheap
 * enough for a row loop. Threads racing on the first call all store the same answer (relaxed
 * atomics: no data race). */
static inline int ref_cpu_avx2_fma_f16c(void)
{
  static _Atomic int known = -1; /* -1: not probed yet */
  int v = atomic_load_explicit(&known, memory_order_relaxed);
  if (v < 0) {
    v = ref_cpu_probe_avx2_fma_f16c();
    atomic_store_explicit(&known, v, memory_order_relaxed);
  }
  return v;
}

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

/* malloc for tables read a row at a time at random (embedding weights): cache-line aligned, so a
 * 256-byte row spans 4 lines, not 5; large ones go through ref_alloc_big. Free with free(). */
static inline void *ref_alloc_rows(size_t bytes)
{
  if (bytes >= REF_HUGE_PAGE)
    return ref_alloc_big(bytes);
  return aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
}

#endif
