/* held.h: case results held in memory, in order, until a run may store them: what a run or
 * campaign with --inject-fault keeps until its fault first lands. Not the storing (session.c,
 * fuzz_campaign.c: each stores them its own way).
 */
#ifndef HARNESS_HELD_H
#define HARNESS_HELD_H

#include <stdint.h>

#include "engine.h"

/* One held result: the case's canonical text (owned), its repeat, the result (owned). */
typedef struct {
  char *canon;
  int repeat;
  eng_case_result r;
} held_case;

typedef struct {
  held_case *v;
  int64_t n;
} held_list;

/* Appends a copy of canon and takes r over (r is left empty). 0, or -1 when out of memory
 * (then r is untouched). */
int held_push(held_list *h, const char *canon, int repeat, eng_case_result *r);

/* Frees every held result and the list; h is left empty. */
void held_free(held_list *h);

#endif
