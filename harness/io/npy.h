/* npy.h: reading and writing NumPy .npy files (format 1.0; 1-D and 2-D, C order, the
 * little-endian dtypes tbecheck exchanges with the oracle). Not an importer of whole batches.
 *
 * Invariant: an npy_array that npy_parse or npy_read returned holds exactly `count` elements of
 * `dtype` (count = product of the shape) in `data`, as the file's little-endian bytes, and the
 * file held exactly those bytes after its header: nothing missing, nothing trailing.
 */
#ifndef HARNESS_NPY_H
#define HARNESS_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "tbe.h"

typedef enum {
  NPY_F4 = 0, /* '<f4' float */
  NPY_F8,     /* '<f8' double */
  NPY_F2,     /* '<f2' IEEE half, as uint16 bits */
  NPY_U2,     /* '<u2' uint16 (bf16 bits travel as this) */
  NPY_I4,     /* '<i4' int32 */
  NPY_I8,     /* '<i8' int64 */
  NPY_U1      /* '|u1' uint8 */
} npy_dtype;

typedef struct {
  npy_dtype dtype;
  int ndim;         /* 1 or 2 */
  int64_t shape[2]; /* shape[1] is 1 when ndim == 1 */
  int64_t count;    /* elements: shape[0] * shape[1] */
  void *data;       /* count elements; never NULL, even when count == 0 */
} npy_array;

/* The dtype a tensor of weight or output dtype t travels as ('<f4', '<f2', bf16 bits '<u2'),
 * and that of indices and offsets of itype t ('<i4', '<i8'). */
npy_dtype npy_of_float(tbe_dtype t);
npy_dtype npy_of_index(tbe_itype t);

/* The dtype's descr string ('<f4'...) and element size in bytes. */
const char *npy_dtype_descr(npy_dtype t);
size_t npy_dtype_size(npy_dtype t);

/* Writes a 1-D (ndim 1, shape[0] elements) or 2-D C-order array to path, format 1.0, header
 * padded to 64 bytes as NumPy does. Returns TBE_EIO naming the path if it cannot be written,
 * TBE_EINVAL for a bad ndim or shape. */
tbe_status npy_write(const char *path, npy_dtype dtype, int ndim, const int64_t *shape,
                     const void *data);

/* Parses a whole .npy image of len bytes. Checks the magic, the version (1.0 or 2.0), the
 * header length, the header dict (exactly the keys descr, fortran_order, shape; Python literal
 * syntax), a supported dtype, fortran_order False, a 1-D or 2-D shape, and that exactly
 * count * size data bytes follow. On success *out owns a copy of the data (free with npy_free);
 * on error returns TBE_EINVAL with field naming the part that is wrong and *out is zeroed.
 * Never reads outside buf[0..len). */
tbe_status npy_parse(const void *buf, size_t len, npy_array *out);

/* Reads and parses the file at path as npy_parse does. TBE_EINVAL if it cannot be opened or is
 * not a regular file, TBE_EIO if reading it fails; errors about the content carry the path in
 * their message. */
tbe_status npy_read(const char *path, npy_array *out);

void npy_free(npy_array *a);

#endif
