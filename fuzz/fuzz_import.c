/* fuzz_import.c: libFuzzer target for `tbecheck import` (harness/store/import.c): the input is a
 * directory of .npy files; any bytes are refused with a clean error naming the file, or give a
 * valid batch that the reference engine runs (bounds check, forward, comparison with the exact
 * forward) without an internal error, leaving the batch's indices and offsets pristine.
 * Not the .npy reader's target (fuzz_npy.c) nor the import tests (harness/store/import_test.c).
 *
 * Input: one byte of options (pool, output dtype, bounds mode), then records of one byte naming
 * the file (its value mod 10: weights, E, D, table_offset, feature_table_map, B_vbe, indices,
 * offsets, per_sample_weights, or 9 for none), a little-endian u16 length and that many bytes
 * of the file. fuzz/pack_import.py packs an exported case directory this way (the seeds).
 */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "fuzz.h"
#include "import.h"

static const char *const files[] = {"weights", "E", "D", "table_offset", "feature_table_map",
                                    "B_vbe", "indices", "offsets", "per_sample_weights"};
enum { NFILES = sizeof files / sizeof files[0] };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static eng_ctx *x;
  if (!x) {
    eng_options o = {.engines = 1u << ENG_REF, .max_violations = 4};
    FUZZ_CHECK(eng_open(&o, &x).code == TBE_OK, "cannot open the reference engine");
  }
  char dir[300], path[400];
  fuzz_path(dir, sizeof dir, "import");
  mkdir(dir, 0700);
  for (int i = 0; i < NFILES; i++) {
    snprintf(path, sizeof path, "%s/%s.npy", dir, files[i]);
    unlink(path);
  }
  fuzz_reader r = {data, size};
  uint8_t opt = fuzz_u8(&r);
  import_options o = {(tbe_pool)(opt % 3), (tbe_dtype)(opt / 3 % 3),
                      (tbe_bounds_mode)(opt / 9 % 4)};
  while (r.n) {
    int f = fuzz_u8(&r) % 10;
    size_t n = fuzz_u16(&r);
    n = n < r.n ? n : r.n;
    if (f < NFILES) {
      snprintf(path, sizeof path, "%s/%s.npy", dir, files[f]);
      fuzz_write_file(path, r.p, n);
    }
    r.p += n;
    r.n -= n;
  }

  tbe_batch b;
  char canon[160];
  tbe_status s = import_dir(dir, &o, &b, canon, sizeof canon);
  if (s.code != TBE_OK) {
    FUZZ_CHECK(s.code == TBE_EINVAL && s.message[0], "import refused with %s: %s",
               tbe_code_name(s.code), s.message);
    return 0;
  }
  FUZZ_CHECK(tbe_batch_validate(&b).code == TBE_OK, "import returned an invalid batch");
  FUZZ_CHECK(!strncmp(canon, "import digest=", 14), "import named the batch '%s'", canon);
  tbe_layout l;
  FUZZ_CHECK(tbe_layout_init(&l, &b).code == TBE_OK, "no layout for an imported batch");
  size_t isz = tbe_itype_size(b.itype);
  size_t nidx = isz * (size_t)b.N, noff = isz * (size_t)(l.total_B + 1);
  tbe_layout_free(&l);
  uint8_t *idx0 = malloc(nidx + 1), *off0 = malloc(noff);
  FUZZ_CHECK(idx0 && off0, "out of memory");
  if (nidx)
    memcpy(idx0, b.indices, nidx);
  memcpy(off0, b.offsets, noff);
  eng_case_result res;
  gpu_fwd_config cfg = {0};
  s = eng_run_batch(x, &b, canon, o.bounds, &cfg, NULL, &res);
  FUZZ_CHECK(s.code == TBE_OK, "the reference engine stopped on an imported batch: %s",
             s.message);
  for (int i = 0; i < res.n_checks; i++)
    FUZZ_CHECK(res.checks[i].status != ENG_ERROR, "the reference failed on %s %s: %s", res.checks[i].path, res.checks[i].output, res.checks[i].reason);
  FUZZ_CHECK((!nidx || !memcmp(idx0, b.indices, nidx)) && !memcmp(off0, b.offsets, noff),
             "the engines did not leave the batch pristine");
  eng_case_result_free(&res);
  free(idx0);
  free(off0);
  tbe_batch_free(&b);
  return 0;
}
