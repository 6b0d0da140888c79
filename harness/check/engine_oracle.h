/* engine_oracle.h: the oracle engine (an eng_fn, engine_ctx.h), its worker's start and stop,
 * and the Python it runs. Not the oracle (ref/oracle/) nor the worker protocol (worker.h).
 */
#ifndef HARNESS_ENGINE_ORACLE_H
#define HARNESS_ENGINE_ORACLE_H

#include "engine_ctx.h"

void eng_run_oracle(eng_ctx *x, tbe_batch *b, const tbe_layout *l, const eng_job *j, eng_run *r);

/* Starts the oracle's worker and its temporary directory, or says in x->unavailable why not;
 * eng_stop_oracle ends both (nothing if it never started). */
void eng_start_oracle(eng_ctx *x);
void eng_stop_oracle(eng_ctx *x);

/* The Python interpreter of the oracle engine and the HTML report: $TBECHECK_PYTHON, or else
 * the one CMake found when it configured the build. */
const char *eng_python(void);

#endif
