/* fuzz_npy.c: libFuzzer target for the .npy reader (harness/io/npy.c): any bytes are refused with
 * TBE_EINVAL naming the part that is wrong, or give a valid array: a supported dtype, ndim 1 or
 * 2, count = the product of the shape, the data present, and written back out it reads the same.
 * Not the importer's target (fuzz_import.c) nor npy's unit test (harness/io/npy_test.c).
 */
#include <string.h>

#include "fuzz.h"
#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  npy_array a;
  tbe_status s = npy_parse(data, size, &a);
  if (s.code != TBE_OK) {
    FUZZ_CHECK(s.code == TBE_EINVAL && s.message[0] && s.field[0],
               "npy_parse failed with %s and no field or message", tbe_code_name(s.code));
    FUZZ_CHECK(!a.data && !a.count, "a refused array was not zeroed");
    return 0;
  }
  FUZZ_CHECK(a.dtype <= NPY_U1, "dtype %d", (int)a.dtype);
  FUZZ_CHECK(a.ndim == 1 || a.ndim == 2, "ndim %d", a.ndim);
  FUZZ_CHECK(a.shape[0] >= 0 && a.shape[1] >= 0 && (a.ndim == 2 || a.shape[1] == 1),
             "shape (%lld, %lld) with ndim %d", (long long)a.shape[0], (long long)a.shape[1],
             a.ndim);
  FUZZ_CHECK(a.count == a.shape[0] * a.shape[1], "count %lld for shape (%lld, %lld)",
             (long long)a.count, (long long)a.shape[0], (long long)a.shape[1]);
  size_t bytes = (size_t)a.count * npy_dtype_size(a.dtype);
  FUZZ_CHECK(bytes <= size, "%zu data bytes from a %zu-byte file", bytes, size);
  FUZZ_CHECK(a.data != NULL, "count %lld with no data array", (long long)a.count);
  FUZZ_CHECK(!bytes || !memcmp(a.data, data + size - bytes, bytes),
             "the data are not the file's last %zu bytes", bytes);

  char path[300];
  fuzz_path(path, sizeof path, "roundtrip.npy");
  s = npy_write(path, a.dtype, a.ndim, a.shape, a.data);
  FUZZ_CHECK(s.code == TBE_OK, "a parsed array cannot be written: %s", s.message);
  npy_array b;
  s = npy_read(path, &b);
  FUZZ_CHECK(s.code == TBE_OK, "a written array does not read back: %s", s.message);
  FUZZ_CHECK(b.dtype == a.dtype && b.ndim == a.ndim && b.shape[0] == a.shape[0] &&
                 b.shape[1] == a.shape[1] && (!bytes || !memcmp(a.data, b.data, bytes)),
             "the array read back differs from the one written");
  npy_free(&a);
  npy_free(&b);
  return 0;
}
