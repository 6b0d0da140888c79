/* engine_oracle.h: the oracle engine (an eng_fn, engine_ctx.h) and its worker's start.
 * Not the oracle (ref/oracle/) nor the worker protocol (worker.h).
 */
#ifndef HARNESS_ENGINE_ORACLE_H
#define HARNESS_ENGINE_ORACLE_H

#include "engine_ctx.h"

void eng_run_oracle(eng_ctx *x, tbe_batch *b, const tbe_layout *l, const eng_job *j, eng_run *r);

/* Starts the oracle's worker and its exchange directory, or says in x->unavailable why not;
 * eng_worker_stop ends both. */
void eng_start_oracle(eng_ctx *x);

#endif
