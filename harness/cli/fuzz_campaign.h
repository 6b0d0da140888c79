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


#endif
