/* fuzz_campaign.h: `tbecheck fuzz`, the differential campaign over the whole edge space, with
 * every case stored and each failure shrunk to a minimal reproducer. Not the libFuzzer targets
 * (fuzz/) nor `tbecheck random` (small valid cases only, case_random in case.h).
 */
#ifndef HARNESS_FUZZ_CAMPAIGN_H
#define HARNESS_FUZZ_CAMPAIGN_H

#include <stddef.h>
#include <stdint.h>

#include "case.h"

/* The command: argv[0] is "fuzz". Returns the exit code (0 no failure, 1 failures, 2 bad usage,
 * 3 I/O or internal error). */
int fuzz_command(int argc, char **argv);

/* Writes into buf the text of case number `index` of the campaign seeded by `seed`: a random
 * valid case (case_random) with up to four edges of the space laid over it (invalid indices,
 * offset corruptions, every bounds mode, hot rows up to SL 10^6, VBE with empty ranks, extreme
 * D and E, every dtype, every knob). `edges` is how many to lay (0..4); the caller lowers it
 * when the text does not parse or generate. Returns the length as snprintf does. */
int fuzz_draw(uint64_t seed, uint64_t index, int edges, char *buf, size_t n);

/* An upper estimate, in milliseconds on a loaded 2-core x86 host, of running case c through the
 * engines in mask `engines` (1u << eng_id, engine.h): what the campaign plans its budget with.
 * A case starts only if this (scaled by how much slower than estimated cases have run so far)
 * fits the time left plus a grace of 1 s; a draw that does not is redrawn with fewer edges, or
 * skipped, and reported. The shrinker stops before a candidate that does not fit. */
double fuzz_cost_ms(const tbe_case *c, unsigned engines);

#endif
