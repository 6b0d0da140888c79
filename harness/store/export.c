/* export.c: `tbecheck export`: a case's inputs (io/batch_files.c writes them) and beside them
 * the reference's results and their facts in the manifest. Not the comparison
 * (ref/oracle/check.py does that), not the generator (gen.c), not the runners (check/).
 */
#include "export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward.h"
#include "batch_files.h"
#include "bounds.h"
#include "case.h"
#include "engine_ref.h"
#include "forward.h"
#include "gen.h"

#define EXPORT_PATH_MAX 4096

/* The reference's facts, as further members of the manifest (batch_files_manifest's `more`):
 * how the bounds check and forward went (ref: its status, warnings: its counter) and, when the
 * case has a backward (has_bwd), how ref_backward went (bref, or not run: bwd_ran = 0). A
 * malloc'd string, or NULL when out of memory. */
static char *export_ref_facts(tbe_status ref, int64_t warnings, int has_bwd, int bwd_ran,
                              tbe_status bref)
{
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f)
    return NULL;
  fputs(",\n  \"ref_status\": ", f);
  batch_files_json_string(f, tbe_code_name(ref.code));
  fprintf(f, ", \"ref_warnings\": %lld", (long long)warnings);
  if (ref.code != TBE_OK) {
    fputs(",\n  \"ref_message\": ", f);
    batch_files_json_string(f, ref.message);
  }
  if (ref.code == TBE_EBOUNDS)
    fprintf(f,
            ",\n  \"ref_feature\": %lld, \"ref_bag\": %lld, \"ref_position\": %lld,"
            " \"ref_value\": %lld",
            (long long)ref.feature, (long long)ref.bag, (long long)ref.position,
            (long long)ref.value);
  if (has_bwd) {
    fputs(",\n  \"ref_backward\": ", f);
    batch_files_json_string(f, !bwd_ran ? "not run" : tbe_code_name(bref.code));
    if (bwd_ran && bref.code != TBE_OK) {
      fputs(", \"ref_backward_message\": ", f);
      batch_files_json_string(f, bref.message);
    }
  }
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

/* Runs the backward (and under bwd.combine=atomic its exact twin) on the bounds-checked batch b
 * and writes the results. Returns the export's failures; the reference's go to *bref. */
static tbe_status export_backward(const char *dir, tbe_batch *b, const tbe_layout *l,
                                  const gen_bwd *bwd, tbe_status *bref)
{
  int64_t n = b->table_offset[b->num_tables], rows = ref_bwd_rows(b);
  double *we = NULL, *wb = NULL, *me = NULL, *mb = NULL;
  void *w = NULL;
  float *m = NULL, *psw = NULL;
  tbe_status s = tbe_ok();
  if (bwd->cfg->combine == REF_COMBINE_ATOMIC)
    *bref = eng_ref_backward_exact(b, l, bwd, &we, &wb, &me, &mb);
  if (bref->code == TBE_OK)
    *bref = eng_ref_backward_run(b, l, bwd, &w, &m, &psw);
  if (bref->code == TBE_OK && we) {
    s = batch_files_array(dir, "ref_weights_exact", NPY_F8, n, 0, we);
    if (s.code == TBE_OK)
      s = batch_files_array(dir, "ref_weights_bound", NPY_F8, n, 0, wb);
    if (s.code == TBE_OK && me)
      s = batch_files_array(dir, "ref_momentum_exact", NPY_F8, rows, 0, me);
    if (s.code == TBE_OK && mb)
      s = batch_files_array(dir, "ref_momentum_bound", NPY_F8, rows, 0, mb);
  }
  if (bref->code == TBE_OK && s.code == TBE_OK) {
    s = batch_files_array(dir, "ref_weights", npy_of_float(b->wdtype), n, 0, w);
    if (s.code == TBE_OK && m)
      s = batch_files_array(dir, "ref_momentum", NPY_F4, rows, 0, m);
    if (s.code == TBE_OK && psw)
      s = batch_files_array(dir, "ref_psw_grad", NPY_F4, b->N, 0, psw);
  }
  free(we);
  free(wb);
  free(me);
  free(mb);
  free(w);
  free(m);
  free(psw);
  return s;
}

tbe_status export_batch_bwd(tbe_batch *b, const char *canon, tbe_bounds_mode mode,
                            const gen_bwd *bwd, const char *dir)
{
  tbe_layout l;
  void *out = NULL;
  char *facts = NULL;
  memset(&l, 0, sizeof l);
  tbe_status s = tbe_layout_init(&l, b);
  if (s.code == TBE_OK)
    s = batch_files_inputs(dir, b, &l, bwd);
  if (s.code != TBE_OK) {
    tbe_layout_free(&l);
    return s;
  }
  tbe_status bref = tbe_ok();
  int bwd_ran = 0;

  int64_t warnings = 0;
  tbe_status ref = ref_bounds_check(b, &l, mode, &warnings);
  s = batch_files_array(dir, "ref_indices", npy_of_index(b->itype), b->N, 0, b->indices);
  if (s.code == TBE_OK)
    s = batch_files_array(dir, "ref_offsets", npy_of_index(b->itype), l.total_B + 1, 0,
                          b->offsets);
  if (s.code != TBE_OK)
    goto done;
  if (ref.code == TBE_OK) {
    size_t bytes = tbe_mul_size((size_t)l.out_elems, tbe_dtype_size(b->out_dtype));
    out = malloc(bytes ? bytes : 1);
    if (!out) {
      s = tbe_error(TBE_ENOMEM, "output", -1, "cannot allocate %zu bytes of output", bytes);
      goto done;
    }
    ref = ref_forward(b, &l, out);
    if (ref.code == TBE_OK)
      s = batch_files_array(dir, "ref_output", npy_of_float(b->out_dtype), l.out_elems, 0, out);
  }
  if (s.code == TBE_OK && ref.code == TBE_OK && bwd) {
    bwd_ran = 1;
    s = export_backward(dir, b, &l, bwd, &bref);
  }
  if (s.code == TBE_OK && !(facts = export_ref_facts(ref, warnings, bwd != NULL, bwd_ran, bref)))
    s = tbe_error(TBE_ENOMEM, "manifest", -1, "cannot format the manifest");
  if (s.code == TBE_OK)
    s = batch_files_manifest(dir, canon, b, &l, mode, bwd, facts);

done:
  free(facts);
  free(out);
  tbe_layout_free(&l);
  return s;
}

tbe_status export_batch(tbe_batch *b, const char *canon, tbe_bounds_mode mode, const char *dir)
{
  return export_batch_bwd(b, canon, mode, NULL, dir);
}

tbe_status export_case(const char *case_text, const char *dir)
{
  tbe_case *c = NULL;
  tbe_batch b;
  memset(&b, 0, sizeof b);
  gen_bwd bwd = {0};
  char canon[1024];

  tbe_status s = case_parse(case_text, &c);
  if (s.code != TBE_OK)
    return s;
  if (case_format(c, canon, sizeof canon) >= (int)sizeof canon) {
    s = tbe_error(TBE_EINTERNAL, "case", -1, "canonical case text longer than %zu bytes",
                  sizeof canon - 1);
    goto done;
  }
  s = gen_case(c, &b, &bwd);
  if (s.code == TBE_OK)
    s = export_batch_bwd(&b, canon, case_bounds(c), bwd.cfg ? &bwd : NULL, dir);

done:
  gen_case_free(&b, &bwd);
  case_free(c);
  return s;
}

tbe_status export_file(const char *path, const char *dir, int *count)
{
  *count = 0;
  case_list cases;
  tbe_status s = case_file_read(path, &cases);
  if (s.code != TBE_OK)
    return s;
  for (int i = 0; i < cases.count && s.code == TBE_OK; i++) {
    char sub[EXPORT_PATH_MAX];
    if (snprintf(sub, sizeof sub, "%s/%04d", dir, i) >= (int)sizeof sub) {
      s = tbe_error(TBE_EINVAL, "dir", -1, "path %s/%04d is too long", dir, i);
      break;
    }
    s = export_case(cases.lines[i].text, sub);
    if (s.code != TBE_OK) {
      char msg[sizeof s.message];
      memcpy(msg, s.message, sizeof msg);
      int n = snprintf(s.message, sizeof s.message, "%s:%d: ", path, cases.lines[i].line);
      if (n >= 0 && (size_t)n < sizeof s.message)
        snprintf(s.message + n, sizeof s.message - (size_t)n, "%s", msg);
    } else {
      (*count)++;
    }
  }
  case_list_free(&cases);
  return s;
}
