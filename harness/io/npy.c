/* npy.c: the .npy writer and the strict .npy reader (format 1.0/2.0, 1-D and 2-D, C order).
 * Not the export of a case (export.c), which decides what goes into which file.
 *
 * The reader trusts nothing: every length is checked against the bytes actually present before
 * it is used, the header dict is parsed as the small Python literal it must be, and a file is
 * accepted only if its data is exactly the size the header promises.
 */
#include "npy.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c stores host bytes as the little-endian dtypes; port it before using a big-endian host"
#endif

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_MAX_DIM (INT64_C(1) << 62)

static const struct {
  const char *descr;
  size_t size;
} npy_types[] = {
  [NPY_F4] = {"<f4", 4}, [NPY_F8] = {"<f8", 8}, [NPY_F2] = {"<f2", 2}, [NPY_U2] = {"<u2", 2},
  [NPY_I4] = {"<i4", 4}, [NPY_I8] = {"<i8", 8}, [NPY_U1] = {"|u1", 1},
};
#define NPY_NTYPES ((int)(sizeof npy_types / sizeof npy_types[0]))

const char *npy_dtype_descr(npy_dtype t) { return npy_types[t].descr; }
size_t npy_dtype_size(npy_dtype t) { return npy_types[t].size; }

void npy_free(npy_array *a)
{
  free(a->data);
  memset(a, 0, sizeof *a);
}

/* ---- writer ---- */

tbe_status npy_write(const char *path, npy_dtype dtype, int ndim, const int64_t *shape,
                     const void *data)
{
  if ((int)dtype < 0 || (int)dtype >= NPY_NTYPES)
    return tbe_error(TBE_EINVAL, "dtype", -1, "%s: unknown npy dtype %d", path, (int)dtype);
  if (ndim != 1 && ndim != 2)
    return tbe_error(TBE_EINVAL, "shape", -1, "%s: ndim must be 1 or 2, got %d", path, ndim);
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0 || shape[i] > NPY_MAX_DIM)
      return tbe_error(TBE_EINVAL, "shape", i, "%s: dimension %d is %lld", path, i,
                       (long long)shape[i]);
  size_t count = (size_t)shape[0];
  if (ndim == 2)
    count = tbe_mul_size(count, (size_t)shape[1]);
  size_t nbytes = tbe_mul_size(count, npy_types[dtype].size);
  if (count == SIZE_MAX || nbytes == SIZE_MAX)
    return tbe_error(TBE_EINVAL, "shape", -1, "%s: array does not fit in memory", path);

  char dict[160];
  int n;
  if (ndim == 1)
    n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%lld,), }",
                 npy_types[dtype].descr, (long long)shape[0]);
  else
    n = snprintf(dict, sizeof dict,
                 "{'descr': '%s', 'fortran_order': False, 'shape': (%lld, %lld), }",
                 npy_types[dtype].descr, (long long)shape[0], (long long)shape[1]);
  /* preamble (10 bytes) + dict + spaces + '\n' is a multiple of 64, as NumPy writes it */
  size_t hlen = (size_t)n + 1;
  hlen += (64 - (10 + hlen) % 64) % 64;
  unsigned char head[10 + 256];
  memcpy(head, NPY_MAGIC, NPY_MAGIC_LEN);
  head[6] = 1;
  head[7] = 0;
  head[8] = (unsigned char)(hlen & 0xff);
  head[9] = (unsigned char)(hlen >> 8);
  memcpy(head + 10, dict, (size_t)n);
  memset(head + 10 + n, ' ', hlen - (size_t)n - 1);
  head[10 + hlen - 1] = '\n';

  FILE *f = fopen(path, "wb");
  if (!f)
    return tbe_error(TBE_EIO, "npy", -1, "cannot create %s: %s", path, strerror(errno));
  int bad = fwrite(head, 1, 10 + hlen, f) != 10 + hlen;
  if (!bad && nbytes)
    bad = fwrite(data, 1, nbytes, f) != nbytes;
  int err = errno;
  if (fclose(f) != 0 && !bad) {
    bad = 1;
    err = errno;
  }
  if (bad)
    return tbe_error(TBE_EIO, "npy", -1, "cannot write %s: %s", path, strerror(err));
  return tbe_ok();
}

/* ---- reader: the header dict, a Python literal such as
 * {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } ---- */

typedef struct {
  const char *s;
  size_t n, i;
} npy_scan;

static void scan_space(npy_scan *p)
{
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                         p->s[p->i] == '\r'))
    p->i++;
}

/* Consumes c after optional whitespace; returns whether it was there. */
static int scan_char(npy_scan *p, char c)
{
  scan_space(p);
  if (p->i < p->n && p->s[p->i] == c) {
    p->i++;
    return 1;
  }
  return 0;
}

/* A quoted string without escapes into buf (NUL-terminated); 0 if there is none or it is
 * longer than cap - 1. */
static int scan_string(npy_scan *p, char *buf, size_t cap)
{
  scan_space(p);
  if (p->i >= p->n || (p->s[p->i] != '\'' && p->s[p->i] != '"'))
    return 0;
  char q = p->s[p->i++];
  size_t k = 0;
  while (p->i < p->n && p->s[p->i] != q) {
    char c = p->s[p->i++];
    if (c == '\\' || c == '\n' || k + 1 >= cap)
      return 0;
    buf[k++] = c;
  }
  if (p->i >= p->n)
    return 0;
  p->i++;
  buf[k] = '\0';
  return 1;
}

/* A word made of letters (True, False). */
static int scan_word(npy_scan *p, const char *w)
{
  scan_space(p);
  size_t len = strlen(w);
  if (p->n - p->i < len || memcmp(p->s + p->i, w, len) != 0)
    return 0;
  size_t e = p->i + len;
  if (e < p->n && ((p->s[e] >= 'a' && p->s[e] <= 'z') || (p->s[e] >= 'A' && p->s[e] <= 'Z') ||
                   (p->s[e] >= '0' && p->s[e] <= '9') || p->s[e] == '_'))
    return 0;
  p->i = e;
  return 1;
}

/* A non-negative decimal integer no larger than NPY_MAX_DIM, as Python writes it. */
static int scan_dim(npy_scan *p, int64_t *v)
{
  scan_space(p);
  size_t start = p->i;
  int64_t x = 0;
  while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
    int digit = p->s[p->i] - '0';
    if (x > (NPY_MAX_DIM - digit) / 10)
      return 0;
    x = x * 10 + digit;
    p->i++;
  }
  if (p->i == start || (p->s[start] == '0' && p->i - start > 1))
    return 0;
  if (p->i < p->n && (p->s[p->i] == '_' || p->s[p->i] == 'L' || p->s[p->i] == 'l' ||
                      p->s[p->i] == '.' || p->s[p->i] == 'e' || p->s[p->i] == 'E'))
    return 0;
  *v = x;
  return 1;
}

static tbe_status header_error(const char *field, const char *what)
{
  return tbe_error(TBE_EINVAL, field, -1, "malformed .npy header: %s", what);
}

/* The shape tuple: () is rejected (0-d), (n,) and (n, m) accepted, a bare (n) is an int. */
static tbe_status scan_shape(npy_scan *p, npy_array *a)
{
  if (!scan_char(p, '('))
    return header_error("shape", "'shape' must be a tuple");
  if (scan_char(p, ')'))
    return header_error("shape", "0-d arrays are not supported, need 1-D or 2-D");
  int nd = 0;
  for (;;) {
    int64_t v;
    if (!scan_dim(p, &v))
      return header_error("shape", "dimensions must be non-negative integers below 2^62");
    if (nd == 2)
      return header_error("shape", "more than 2 dimensions are not supported");
    a->shape[nd++] = v;
    int comma = scan_char(p, ',');
    if (scan_char(p, ')')) {
      if (nd == 1 && !comma)
        return header_error("shape", "'(n)' is not a tuple; write '(n,)'");
      break;
    }
    if (!comma)
      return header_error("shape", "expected ',' or ')' in the shape tuple");
  }
  a->ndim = nd;
  if (nd == 1)
    a->shape[1] = 1;
  return tbe_ok();
}

static tbe_status parse_dict(const char *s, size_t n, npy_array *a)
{
  npy_scan p = {s, n, 0};
  int have_descr = 0, have_order = 0, have_shape = 0;
  if (!scan_char(&p, '{'))
    return header_error("header", "the header must be a dict starting with '{'");
  while (!scan_char(&p, '}')) {
    char key[32];
    if (!scan_string(&p, key, sizeof key))
      return header_error("header", "expected a quoted key or '}'");
    if (!scan_char(&p, ':'))
      return header_error("header", "expected ':' after a key");
    if (strcmp(key, "descr") == 0) {
      char d[16];
      if (have_descr++)
        return header_error("descr", "duplicate key 'descr'");
      if (!scan_string(&p, d, sizeof d))
        return header_error("descr", "'descr' must be a short quoted string");
      int t = 0;
      while (t < NPY_NTYPES && strcmp(d, npy_types[t].descr) != 0)
        t++;
      if (t == NPY_NTYPES)
        return tbe_error(TBE_EINVAL, "descr", -1,
                         "unsupported dtype '%s' (supported: <f4 <f8 <f2 <u2 <i4 <i8 |u1)", d);
      a->dtype = (npy_dtype)t;
    } else if (strcmp(key, "fortran_order") == 0) {
      if (have_order++)
        return header_error("fortran_order", "duplicate key 'fortran_order'");
      if (scan_word(&p, "True"))
        return header_error("fortran_order", "Fortran order is not supported");
      if (!scan_word(&p, "False"))
        return header_error("fortran_order", "'fortran_order' must be True or False");
    } else if (strcmp(key, "shape") == 0) {
      if (have_shape++)
        return header_error("shape", "duplicate key 'shape'");
      tbe_status s2 = scan_shape(&p, a);
      if (s2.code != TBE_OK)
        return s2;
    } else {
      return tbe_error(TBE_EINVAL, "header", -1, "malformed .npy header: unknown key '%s'", key);
    }
    if (!scan_char(&p, ',')) {
      if (!scan_char(&p, '}'))
        return header_error("header", "expected ',' or '}' after a value");
      break;
    }
  }
  if (!have_descr || !have_order || !have_shape)
    return header_error("header", !have_descr   ? "missing key 'descr'"
                                  : !have_order ? "missing key 'fortran_order'"
                                                : "missing key 'shape'");
  scan_space(&p);
  if (p.i != n)
    return header_error("header", "unexpected text after the dict");
  return tbe_ok();
}

/* Parses magic, version, header length and dict; *data_off receives where the data starts. */
static tbe_status parse_header(const unsigned char *b, size_t len, npy_array *a, size_t *data_off)
{
  if (len < NPY_MAGIC_LEN || memcmp(b, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
    return tbe_error(TBE_EINVAL, "magic", -1, "not a .npy file (bad magic)");
  if (len < 8)
    return tbe_error(TBE_EINVAL, "version", -1, "truncated .npy file: no version");
  if ((b[6] != 1 && b[6] != 2) || b[7] != 0)
    return tbe_error(TBE_EINVAL, "version", -1, "unsupported .npy version %u.%u (need 1.0 or 2.0)",
                     b[6], b[7]);
  size_t pre = b[6] == 1 ? 10 : 12;
  if (len < pre)
    return tbe_error(TBE_EINVAL, "header_len", -1, "truncated .npy file: no header length");
  size_t hlen = (size_t)b[8] | (size_t)b[9] << 8;
  if (b[6] == 2)
    hlen |= (size_t)b[10] << 16 | (size_t)b[11] << 24;
  if (hlen > len - pre)
    return tbe_error(TBE_EINVAL, "header_len", -1,
                     "truncated .npy file: header of %zu bytes, %zu present", hlen, len - pre);
  const char *h = (const char *)b + pre;
  if (hlen == 0 || h[hlen - 1] != '\n')
    return header_error("header", "the header must end with a newline");
  for (size_t i = 0; i < hlen; i++)
    if ((unsigned char)h[i] < 0x20 && h[i] != '\n' && h[i] != '\t' && h[i] != '\r')
      return header_error("header", "control character in the header");
  tbe_status s = parse_dict(h, hlen, a);
  if (s.code != TBE_OK)
    return s;
  *data_off = pre + hlen;
  return tbe_ok();
}

tbe_status npy_parse(const void *buf, size_t len, npy_array *out)
{
  memset(out, 0, sizeof *out);
  npy_array a;
  memset(&a, 0, sizeof a);
  size_t off = 0;
  tbe_status s = parse_header(buf, len, &a, &off);
  if (s.code != TBE_OK)
    return s;
  size_t count = tbe_mul_size((size_t)a.shape[0], (size_t)a.shape[1]);
  size_t nbytes = tbe_mul_size(count, npy_types[a.dtype].size);
  if (count == SIZE_MAX || nbytes == SIZE_MAX || count > (size_t)INT64_MAX)
    return tbe_error(TBE_EINVAL, "shape", -1, "shape %lld x %lld is too large",
                     (long long)a.shape[0], (long long)a.shape[1]);
  if (len - off != nbytes)
    return tbe_error(TBE_EINVAL, "data", -1, "%s data: the shape promises %zu bytes, the file has %zu",
                     len - off < nbytes ? "truncated" : "trailing", nbytes, len - off);
  a.count = (int64_t)count;
  a.data = malloc(nbytes ? nbytes : 1); /* never NULL: an empty array is still an array */
  if (!a.data)
    return tbe_error(TBE_ENOMEM, "data", -1, "cannot allocate %zu bytes", nbytes);
  memcpy(a.data, (const unsigned char *)buf + off, nbytes);
  *out = a;
  return tbe_ok();
}

tbe_status npy_read(const char *path, npy_array *out)
{
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "rb");
  if (!f)
    return tbe_error(TBE_EINVAL, "npy", -1, "cannot open %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > LONG_MAX) {
    fclose(f);
    return tbe_error(TBE_EINVAL, "npy", -1, "%s is not a .npy file (not a regular file)", path);
  }
  long size = (long)st.st_size;
  unsigned char *buf = malloc(size ? (size_t)size : 1);
  if (!buf) {
    fclose(f);
    return tbe_error(TBE_ENOMEM, "npy", -1, "cannot allocate %ld bytes to read %s", size, path);
  }
  size_t got = fread(buf, 1, (size_t)size, f);
  int err = ferror(f) ? errno : 0;
  int more = fgetc(f) != EOF;
  fclose(f);
  if (err || got != (size_t)size || more) {
    free(buf);
    return tbe_error(TBE_EIO, "npy", -1, "cannot read %s: %s", path,
                     err ? strerror(err) : "the file changed size while being read");
  }
  tbe_status s = npy_parse(buf, got, out);
  free(buf);
  if (s.code == TBE_EINVAL) {
    char msg[sizeof s.message];
    memcpy(msg, s.message, sizeof msg);
    int n = snprintf(s.message, sizeof s.message, "%s: ", path);
    if (n >= 0 && (size_t)n < sizeof s.message)
      snprintf(s.message + n, sizeof s.message - (size_t)n, "%s", msg);
  }
  return s;
}

npy_dtype npy_of_float(tbe_dtype t)
{
  return t == TBE_FP32 ? NPY_F4 : t == TBE_FP16 ? NPY_F2 : NPY_U2;
}

npy_dtype npy_of_index(tbe_itype t) { return t == TBE_I32 ? NPY_I4 : NPY_I8; }
