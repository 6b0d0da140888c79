/* engine_worker.h: what the worker engines (the oracle, external engines) share: starting one
 * with its exchange directory, handing it a case as files, stopping it. Not their outputs.
 */
#ifndef HARNESS_ENGINE_WORKER_H
#define HARNESS_ENGINE_WORKER_H

#include "engine_ctx.h"
#include "npy.h"

/* Starts engine e's worker (argv), reads its greeting into greeting and makes its exchange
 * directory; 0 on success. Otherwise x->unavailable[e] says why, and nothing is left running. */
int eng_worker_start(eng_ctx *x, eng_id e, char *const argv[], char *greeting, size_t n);

/* Hands job j on batch b to engine e's worker: its inputs (pristine) and manifest written to
 * its exchange directory, and the directory's path sent; its reply line into reply. An input
 * past max_bytes is refused (TBE_EINVAL, its message the reason) before anything is written. */
tbe_status eng_worker_ask(eng_ctx *x, eng_id e, const tbe_batch *b, const tbe_layout *l,
                          const eng_job *j, int64_t max_bytes, char *reply, size_t n);

/* Stops engine e's worker and removes its exchange directory (nothing if never started). */
void eng_worker_stop(eng_ctx *x, eng_id e);

/* Reads dir/name.npy, which must hold n elements of type want (TBE_EINVAL names the file and
 * what it holds otherwise). */
tbe_status eng_read_npy(const char *dir, const char *name, npy_dtype want, int64_t n,
                        npy_array *a);

#endif
