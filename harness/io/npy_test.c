/* npy_test.c: unit test of the .npy writer and reader: byte-exact headers as NumPy writes them,
 * round trips of every dtype, and rejection of truncated, garbage and unsupported files.
 * Not the fuzz target (fuzz/), which only proves the reader never crashes.
 */
#include "npy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

static char tmpdir[64];

static void temp_path(char *buf, size_t n, const char *name)
{
  snprintf(buf, n, "%s/%s", tmpdir, name);
}

/* Reads the whole file into a malloc'd buffer; *len receives its size. */
static unsigned char *slurp(const char *path, size_t *len)
{
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  unsigned char *buf = malloc(1 << 16);
  *len = fread(buf, 1, 1 << 16, f);
  fclose(f);
  return buf;
}

/* What np.save(np.arange(3, dtype='<i4')) writes, byte for byte. */
static void test_numpy_bytes(void)
{
  char path[128];
  temp_path(path, sizeof path, "arange.npy");
  int32_t v[3] = {0, 1, 2};
  int64_t shape[1] = {3};
  tbe_status s = npy_write(path, NPY_I4, 1, shape, v);
  CHECK(s.code == TBE_OK, "write: %s", s.message);
  size_t len = 0;
  unsigned char *got = slurp(path, &len);
  const char *dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }";
  CHECK(got && len == 128 + 12, "file is %zu bytes, NumPy writes 140", len);
  if (got && len == 140) {
    CHECK(memcmp(got, "\x93NUMPY\x01\x00\x76\x00", 10) == 0, "preamble differs");
    CHECK(memcmp(got + 10, dict, strlen(dict)) == 0, "dict differs");
    CHECK(got[127] == '\n' && got[126] == ' ', "padding differs");
    CHECK(memcmp(got + 128, v, 12) == 0, "data differs");
  }
  free(got);
  unlink(path);
}

/* Writes and reads back a 1-D and a 2-D array of each dtype, including an empty one. */
static void test_round_trips(void)
{
  static const npy_dtype types[] = {NPY_F4, NPY_F8, NPY_F2, NPY_U2, NPY_I4, NPY_I8, NPY_U1};
  unsigned char src[6 * 5 * 8];
  for (size_t i = 0; i < sizeof src; i++)
    src[i] = (unsigned char)(i * 37 + 11);
  for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
    npy_dtype t = types[k];
    const int64_t shapes[3][2] = {{30, 1}, {6, 5}, {0, 1}};
    for (int j = 0; j < 3; j++) {
      int ndim = j == 1 ? 2 : 1;
      char path[128];
      temp_path(path, sizeof path, "rt.npy");
      tbe_status s = npy_write(path, t, ndim, shapes[j], src);
      CHECK(s.code == TBE_OK, "%s write: %s", npy_dtype_descr(t), s.message);
      npy_array a;
      s = npy_read(path, &a);
      CHECK(s.code == TBE_OK, "%s read: %s", npy_dtype_descr(t), s.message);
      if (s.code == TBE_OK) {
        int64_t count = shapes[j][0] * shapes[j][1];
        CHECK(a.dtype == t && a.ndim == ndim && a.shape[0] == shapes[j][0] &&
                  a.shape[1] == shapes[j][1] && a.count == count,
              "%s: header read back differs", npy_dtype_descr(t));
        CHECK(count == 0 || memcmp(a.data, src, (size_t)count * npy_dtype_size(t)) == 0,
              "%s: data read back differs", npy_dtype_descr(t));
      }
      npy_free(&a);
      unlink(path);
    }
  }
}

/* A file image: preamble for version 1.0, the header padded to 64 as given, then data. */
static size_t image(unsigned char *buf, const char *dict, const void *data, size_t nbytes)
{
  size_t hlen = strlen(dict) + 1;
  hlen += (64 - (10 + hlen) % 64) % 64;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (unsigned char)(hlen & 0xff);
  buf[9] = (unsigned char)(hlen >> 8);
  memset(buf + 10, ' ', hlen);
  memcpy(buf + 10, dict, strlen(dict));
  buf[10 + hlen - 1] = '\n';
  memcpy(buf + 10 + hlen, data, nbytes);
  return 10 + hlen + nbytes;
}

static void expect_reject(const char *dict, size_t nbytes, const char *field)
{
  unsigned char buf[512], data[64] = {0};
  size_t len = image(buf, dict, data, nbytes);
  npy_array a;
  tbe_status s = npy_parse(buf, len, &a);
  CHECK(s.code == TBE_EINVAL && strcmp(s.field, field) == 0,
        "%s: expected EINVAL on field %s, got code %d field %s (%s)", dict, field, s.code, s.field,
        s.message);
  CHECK(a.data == NULL && a.count == 0, "%s: output not cleared on error", dict);
  npy_free(&a);
}

static void expect_accept(const char *dict, size_t nbytes, npy_dtype t, int ndim, int64_t n0,
                          int64_t n1)
{
  unsigned char buf[512], data[64] = {0};
  size_t len = image(buf, dict, data, nbytes);
  npy_array a;
  tbe_status s = npy_parse(buf, len, &a);
  CHECK(s.code == TBE_OK, "%s: %s", dict, s.message);
  CHECK(s.code != TBE_OK || (a.dtype == t && a.ndim == ndim && a.shape[0] == n0 &&
                             a.shape[1] == n1),
        "%s: parsed header differs", dict);
  npy_free(&a);
}

/* Headers other writers produce (key order, quotes, spacing) are Python literals too. */
static void test_header_syntax(void)
{
  expect_accept("{'shape': (2, 3), 'fortran_order': False, 'descr': '<i8'}", 48, NPY_I8, 2, 2, 3);
  expect_accept("{\"descr\":\"<f2\",\"fortran_order\":False,\"shape\":(4,)}", 8, NPY_F2, 1, 4, 1);
  expect_accept("{'descr': '|u1', 'fortran_order': False, 'shape': (0, 7,), }", 0, NPY_U1, 2, 0,
                7);
  expect_reject("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, "descr");
  expect_reject("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, "descr");
  expect_reject("{'descr': '<u1', 'fortran_order': False, 'shape': (2,), }", 2, "descr");
  expect_reject("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, "descr");
  expect_reject("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8, "fortran_order");
  expect_reject("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", 8, "fortran_order");
  expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2), }", 32, "shape");
  expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4, "shape");
  expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", 8, "shape");
  expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", 8, "shape");
  expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (2.0,), }", 8, "shape");
  expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0,
                "shape");
  expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, "
                "4611686018427387904), }",
                0, "shape");
  expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8, "header");
  expect_reject("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8,
                "descr");
  expect_reject("{'descr': '<f4', 'shape': (2,)}", 8, "header");
  expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", 8, "header");
  expect_reject("{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", 8, "header");
  expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", 8, "header");
  expect_reject("{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", 8, "descr");
  expect_reject("['descr', '<f4']", 8, "header");
  /* the data must be exactly what the shape promises */
  expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 7, "data");
  expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 9, "data");
  expect_reject("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }", 40, "data");
}

/* Preamble damage, every truncation of a valid file, and random byte flips: never a crash,
 * only TBE_EINVAL or a result consistent with itself. */
static void test_damage(void)
{
  unsigned char good[512];
  int64_t vals[5] = {1, 2, 3, 4, 5};
  size_t len = image(good, "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }", vals,
                     sizeof vals);
  unsigned char buf[512];
  npy_array a;
  tbe_status s;

  memcpy(buf, good, len);
  buf[1] = 'M';
  s = npy_parse(buf, len, &a);
  CHECK(s.code == TBE_EINVAL && strcmp(s.field, "magic") == 0, "bad magic: %s", s.message);
  memcpy(buf, good, len);
  buf[6] = 3;
  s = npy_parse(buf, len, &a);
  CHECK(s.code == TBE_EINVAL && strcmp(s.field, "version") == 0, "version 3: %s", s.message);
  memcpy(buf, good, len);
  buf[9] = 0x7f;
  s = npy_parse(buf, len, &a);
  CHECK(s.code == TBE_EINVAL && strcmp(s.field, "header_len") == 0, "long header: %s", s.message);
  memcpy(buf, good, len);
  buf[8] = 0;
  buf[9] = 0;
  s = npy_parse(buf, len, &a);
  CHECK(s.code == TBE_EINVAL, "zero header length accepted");

  for (size_t n = 0; n < len; n++) {
    s = npy_parse(good, n, &a);
    CHECK(s.code == TBE_EINVAL, "prefix of %zu bytes accepted", n);
  }
  s = npy_parse(good, len, &a);
  CHECK(s.code == TBE_OK && a.count == 5 && memcmp(a.data, vals, sizeof vals) == 0,
        "intact file: %s", s.message);
  npy_free(&a);

  uint64_t x = 0x9e3779b97f4a7c15u;
  for (int iter = 0; iter < 20000; iter++) {
    memcpy(buf, good, len);
    for (int k = 0; k < 1 + iter % 4; k++) {
      x = x * 6364136223846793005u + 1442695040888963407u;
      buf[(x >> 33) % len] = (unsigned char)(x >> 20);
    }
    x = x * 6364136223846793005u + 1442695040888963407u;
    size_t n = iter % 3 ? len : (size_t)((x >> 33) % (len + 1));
    s = npy_parse(buf, n, &a);
    CHECK(s.code == TBE_OK || s.code == TBE_EINVAL, "flip %d: code %d", iter, s.code);
    if (s.code == TBE_OK)
      CHECK(a.count == a.shape[0] * a.shape[1] &&
                (size_t)a.count * npy_dtype_size(a.dtype) <= n,
            "flip %d: inconsistent result", iter);
    npy_free(&a);
  }
}

static void test_files(void)
{
  char path[128];
  npy_array a;
  temp_path(path, sizeof path, "missing.npy");
  tbe_status s = npy_read(path, &a);
  CHECK(s.code == TBE_EINVAL && strstr(s.message, path), "missing file: %d %s", s.code,
        s.message);
  s = npy_read("/", &a); /* a directory: its size is not a file's */
  CHECK(s.code == TBE_EINVAL && strstr(s.message, "not a regular file"), "directory: %d %s",
        s.code, s.message);

  temp_path(path, sizeof path, "garbage.npy");
  FILE *f = fopen(path, "wb");
  fputs("this is not an npy file at all", f);
  fclose(f);
  s = npy_read(path, &a);
  CHECK(s.code == TBE_EINVAL && strstr(s.message, path), "garbage: %d %s", s.code, s.message);
  unlink(path);

  temp_path(path, sizeof path, "no_such_dir/x.npy");
  int64_t shape[1] = {1};
  float v = 1.0f;
  s = npy_write(path, NPY_F4, 1, shape, &v);
  CHECK(s.code == TBE_EIO, "write into a missing directory: %d %s", s.code, s.message);
  int64_t bad[2] = {2, -1};
  s = npy_write(path, NPY_F4, 2, bad, &v);
  CHECK(s.code == TBE_EINVAL, "negative dimension written: %s", s.message);
  s = npy_write(path, NPY_F4, 3, bad, &v);
  CHECK(s.code == TBE_EINVAL, "3-D written: %s", s.message);
}

int main(void)
{
  const char *base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/npy_test.XXXXXX", base && strlen(base) < 40 ? base : "/tmp");
  if (!mkdtemp(tmpdir)) {
    fprintf(stderr, "cannot create a temporary directory %s\n", tmpdir);
    return 1;
  }
  test_numpy_bytes();
  test_round_trips();
  test_header_syntax();
  test_damage();
  test_files();
  rmdir(tmpdir);
  return TEST_MAIN_RESULT();
}
