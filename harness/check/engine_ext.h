/* engine_ext.h: the external engines (ext.NAME): a TBE implementation outside tbecheck, such as
 * FBGEMM's, run as a worker process behind the protocol below. Not its adapters (ext/).
 *
 * ext.NAME runs the executable tbecheck-ext-NAME when one is on PATH, else the Python driver
 * eng_ext.py, which imports the module tbecheck_ext_NAME (from PYTHONPATH, then harness/check/ext/
 * where the shipped adapters live) and speaks the protocol for it. The protocol (worker.h's
 * lines): the first line is "ready order=ORDER[ version=TEXT]" (ORDER: the order model in
 * ref/forward_order.h its deterministic outputs follow) or "unavailable: REASON". Then for each line
 * naming a directory of a case's inputs (io/batch_files.h) it writes there what it computed:
 *   ext_indices.npy, ext_offsets.npy  after its bounds check, in the index dtype
 *   ext_warnings.npy                  '<i8' [1], the bounds check's counter
 *   ext_offender.npy                  '<i8' [2] (feature, bag) for an offset offender, [4]
 *                                     (feature, bag, position, value) for an index offender:
 *                                     its FATAL check stopped the call (then no outputs below)
 *   ext_output.npy                    the forward's output bits, as oracle_output.npy
 *   ext_weights.npy, ext_momentum.npy, ext_psw_grad.npy   the backward's, as the oracle's
 *   ext_declined.txt                  lines "OUTPUT: REASON" for outputs it does not give on
 *                                     purpose (a semantic difference the spec allows)
 *   ext_raised.txt                    the same for outputs it failed on although the input
 *                                     was valid (it raised): each a failure with the reason
 * and answers "done", "unsupported: REASON" (a case outside what it implements) or
 * "error: MESSAGE". An output neither written nor declined is a failure: it should be there.
 */
#ifndef HARNESS_ENGINE_EXT_H
#define HARNESS_ENGINE_EXT_H

#include "engine_ctx.h"

/* Starts external engine e's worker, or says in x->unavailable why it cannot run. */
void eng_start_ext(eng_ctx *x, eng_id e);

void eng_run_ext(eng_ctx *x, tbe_batch *b, const tbe_layout *l, const eng_job *j, eng_run *r);

#endif
