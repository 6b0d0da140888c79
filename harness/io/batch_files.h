/* batch_files.h: a batch's generated inputs as .npy files plus a manifest.json of its facts:
 * what the NumPy oracle (and any engine outside this process) reads. Not the reference's
 * results, which `tbecheck export` adds beside them (store/export.h), nor the importer.
 *
 * A directory holds (dtypes per TBE_SEMANTICS.md section 1; 16-bit floats as bits):
 *   weights.npy            [table_offset[num_tables]]  '<f4' fp32, '<f2' fp16, '<u2' bf16 bits
 *   table_offset.npy       [num_tables + 1] '<i8'
 *   E.npy                  [num_tables] '<i8'
 *   D.npy                  [num_tables] '<i4'
 *   feature_table_map.npy  [T] '<i4'
 *   B_vbe.npy              [T, R] '<i4' (VBE only)
 *   indices.npy            [N] '<i4' or '<i8', as generated (before the bounds check)
 *   offsets.npy            [total_B + 1] same dtype as indices, as generated
 *   per_sample_weights.npy [N] '<f4' (weighted only)
 * and when the case runs the backward (opt is not none):
 *   grad_output.npy        [out_elems] in the output dtype
 *   momentum.npy           [rows] '<f4', rows = sum of E, at rows_cumsum[table] + row
 *                          (rowwise_adagrad only)
 *   manifest.json          one flat JSON object: case (canonical text), num_tables, T, B, R,
 *                          wdtype, out_dtype, itype, pool, weighted (0/1), bounds (mode name),
 *                          N, total_B, out_elems; with the backward also opt, lr, eps, wd,
 *                          lambda, clip (0: off), sr, step, seed (the Philox key),
 *                          bwd_threshold, bwd_chunk, bwd_combine, rows. fp32 numbers are
 *                          written exactly (17 significant digits).
 */
#ifndef HARNESS_BATCH_FILES_H
#define HARNESS_BATCH_FILES_H

#include <stdio.h>

#include "gen.h"
#include "npy.h"
#include "tbe.h"

/* Creates dir (and missing parents) and writes the input arrays above of the batch b as
 * generated (before its bounds check), with bwd's (NULL: forward only). TBE_EIO for files,
 * TBE_EINVAL for a path too long. */
tbe_status batch_files_inputs(const char *dir, const tbe_batch *b, const tbe_layout *l,
                              const gen_bwd *bwd);

/* Writes dir/manifest.json for b (laid out by l), named by canon, under bounds mode `mode`,
 * with bwd's keys when bwd is not NULL, then `more` (NULL, or further members of the object,
 * each line starting ",\n  ") before the closing brace. */
tbe_status batch_files_manifest(const char *dir, const char *canon, const tbe_batch *b,
                                const tbe_layout *l, tbe_bounds_mode mode, const gen_bwd *bwd,
                                const char *more);

/* Writes dir/name.npy, 1-D of n elements (or 2-D n x m when m > 0). */
tbe_status batch_files_array(const char *dir, const char *name, npy_dtype t, int64_t n, int64_t m,
                             const void *data);

/* Writes s as a JSON string literal. */
void batch_files_json_string(FILE *f, const char *s);

#endif
