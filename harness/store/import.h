/* import.h: reads a captured batch (real inputs from another system) from .npy files, in the
 * layout export.h writes, into a tbe_batch for `tbecheck import`. Not the exporter (export.h).
 *
 * Files of the directory (integer metadata may be '<i4' or '<i8'):
 *   weights.npy             required; '<f4' fp32, '<f2' fp16, '<u2' bf16 bits; any shape, flat
 *   E.npy, D.npy            required; rows and columns of each table
 *   table_offset.npy        optional; [num_tables + 1], derived from E and D when absent
 *   feature_table_map.npy   optional; [T], the identity (T = num_tables) when absent
 *   B_vbe.npy               optional; [T, R] bags per feature and rank: a VBE batch
 *   indices.npy, offsets.npy  required; both '<i4' or both '<i8', as captured (not yet checked)
 *   per_sample_weights.npy  optional; '<f4' [N]
 * Other files (manifest.json, ref_*.npy) are ignored.
 */
#ifndef HARNESS_IMPORT_H
#define HARNESS_IMPORT_H

#include <stddef.h>

#include "tbe.h"

/* What the files cannot say: pooling, output dtype and bounds mode of the call. */
typedef struct {
  tbe_pool pool;
  tbe_dtype out;
  tbe_bounds_mode bounds;
} import_options;

/* Reads dir into *b (malloc'd arrays; tbe_batch_free) and validates it. Writes the batch's
 * identity into canon (n bytes): "import digest=HHHHHHHHHHHHHHHH pool=P out=O bounds=M", the
 * digest covering every array read, so the same capture is the same case. TBE_EINVAL names
 * the file that is missing, malformed or inconsistent; TBE_EIO one that cannot be read. */
tbe_status import_dir(const char *dir, const import_options *o, tbe_batch *b, char *canon,
                      size_t n);

#endif
