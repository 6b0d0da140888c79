/* footprint.h: what a parsed case's shape implies before anything is generated: the lookups each
 * table can get, and the memory a run of the case needs. Not the generator (gen.c), which draws
 * the actual shape, nor the measurement of what a machine has (runinfo.h).
 *
 * Invariant: every figure is computed from the case's fields alone, in double precision (a shape
 * may name 2^40 rows of 2048 columns), so no product overflows; drawn quantities (E=a..b,
 * L=normal:MU,SIGMA, a VBE B range) enter the memory estimate at their expected value and the
 * lookup maximum at their largest.
 */
#ifndef HARNESS_FOOTPRINT_H
#define HARNESS_FOOTPRINT_H

#include <stdint.h>

#include "case.h"

/* The most lookups the features of table j can make: every bag at its largest B and L. */
double footprint_max_lookups(const tbe_case *c, int32_t j);

/* The expected lookups of the features of table j: every bag at its expected B and L. */
double footprint_lookups(const tbe_case *c, int32_t j);

/* Estimated peak memory of running case c, in bytes (saturated at INT64_MAX). */
typedef struct {
  int64_t host; /* generation, the reference (forward, exact twin, backward), the GPU engine's
                 * host copies when with_gpu */
  int64_t gpu;  /* the GPU engine's device buffers (0 without with_gpu) */
} footprint;

/* The estimate of c, with or without the GPU engine. It sums the arrays alive at the peak of a
 * run (harness/check/engine.c keeps every engine's outputs until the case's checks are made), so it is
 * an upper estimate for fixed shapes, and an expectation for drawn ones. */
void footprint_case(const tbe_case *c, int with_gpu, footprint *f);

/* An upper estimate, in milliseconds on a loaded 2-core x86 host, of running case c through the
 * reference and, as asked, the gpu and oracle engines: what the fuzz campaign plans its budget
 * with. A case starts only if this (scaled by how much slower than estimated cases have run so
 * far) fits the time left plus a grace of 1 s; a draw that does not is redrawn with fewer
 * edges, or skipped, and reported. The shrinker stops before a candidate that does not fit. */
double footprint_cost_ms(const tbe_case *c, int with_gpu, int with_oracle);

#endif
