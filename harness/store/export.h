/* export.h: `tbecheck export`: a case's inputs as io/batch_files.h writes them, and beside them
 * the reference's results, for the NumPy oracle's own cross-check (ref/oracle/check.py) and
 * for users. Not the importer (import.h), which reads such inputs back into a tbe_batch.
 *
 * Besides batch_files.h's files, a case directory holds:
 *   ref_indices.npy, ref_offsets.npy  after ref_bounds_check (repaired; unchanged in FATAL/NONE)
 *   ref_output.npy         [out_elems] in the output dtype, only when the reference succeeded
 * and when the case runs the backward (opt is not none), when the bounds check let it through:
 *   ref_weights.npy        [table_offset[num_tables]] the weights after ref_backward, in the
 *                          weight dtype as weights.npy
 *   ref_momentum.npy       [rows] '<f4' after ref_backward (rowwise_adagrad only)
 *   ref_psw_grad.npy       [N] '<f4' (weighted only)
 *   ref_weights_exact.npy, ref_weights_bound.npy, ref_momentum_exact.npy,
 *   ref_momentum_bound.npy '<f8', ref_backward_exact's value and bound per element
 *                          (bwd.combine=atomic only; momentum ones with rowwise_adagrad)
 * and the manifest gains the reference's facts (see export_case).
 */
#ifndef HARNESS_EXPORT_H
#define HARNESS_EXPORT_H

#include "gen.h"
#include "tbe.h"

/* Parses and generates case_text, creates dir (and missing parents), and writes the files
 * above. manifest.json holds batch_files.h's keys and ref_status ("ok" or
 * tbe_code_name of the reference's failure), ref_warnings (the bounds-check counter), and
 * when ref_status is not "ok", ref_message; for a bounds-check failure also ref_feature,
 * ref_bag, ref_position, ref_value (the offender, tbe_status's fields). With the backward also
 * ref_backward ("ok", "not run" when the bounds check stopped the call, or tbe_code_name of its
 * failure) with ref_backward_message when it failed.
 * A failure of the reference is recorded, not returned; the return value reports failures of
 * the export itself (a case that does not parse, TBE_EIO for files, TBE_ENOMEM). */
tbe_status export_case(const char *case_text, const char *dir);

/* Writes the files above for a validated batch b as generated (its bounds not yet checked),
 * named by canon (stored as the manifest's "case"), with bounds mode `mode` and, when bwd is not
 * NULL, the backward (gen_bwd). The reference's bounds check runs on b itself: b's indices
 * and offsets are repaired in place; its weights are left as they were. Fails as export_case
 * does. */
tbe_status export_batch_bwd(tbe_batch *b, const char *canon, tbe_bounds_mode mode,
                            const gen_bwd *bwd, const char *dir);

/* export_batch_bwd without the backward. */
tbe_status export_batch(tbe_batch *b, const char *canon, tbe_bounds_mode mode, const char *dir);

/* Exports case i (0-based) of the .cases file at path into dir/NNNN (i as %04d) and sets *count
 * to the number of cases exported. Stops at the first failure, naming the file and line. */
tbe_status export_file(const char *path, const char *dir, int *count);

#endif
