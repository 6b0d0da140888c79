/* case_random.h: random valid cases, as case texts: the general sweep and the small-table
 * path's. Not the fuzz campaign (harness/cli/fuzz_campaign.c), which draws its own.
 */
#ifndef HARNESS_CASE_RANDOM_H
#define HARNESS_CASE_RANDOM_H

#include <stddef.h>
#include <stdint.h>

/* Writes into buf the text of random valid case number `index` of the sweep seeded by `seed`
 * (small shapes, every option drawn). Returns the length as snprintf does. */
int case_random(uint64_t seed, uint64_t index, char *buf, size_t n);
/* The same for cases whose every feature takes the small-table tensor-core path (fwd.small=on,
 * each feature eligible: fp16 weights, fp32 output, SUM or MEAN, unweighted, no VBE, E <= 64,
 * D in 64..128 a multiple of 8), with bags past the histogram's 256 positions, repaired and
 * pruned indices, hot rows and shared tables: the campaign that holds the path to its model. */
int case_random_small(uint64_t seed, uint64_t index, char *buf, size_t n);

#endif
