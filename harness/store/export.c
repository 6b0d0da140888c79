/* export.c: a case's inputs and the reference's results as .npy files and a manifest.json, for
 * the NumPy oracle. Not the comparison (ref/oracle/check.py does that), not the CLI, not the
 * generator (gen.c) nor the reference runners it writes the results of (engine.c).
 */
#include "export.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backward.h"
#include "bounds.h"
#include "case.h"
#include "engine.h"
#include "forward.h"
#include "gen.h"
#include "npy.h"

#define EXPORT_PATH_MAX 4096

/* mkdir -p: creates dir and each missing parent; fails if a component is not a directory. */
static tbe_status export_mkdir_p(const char *dir)
{
  char p[EXPORT_PATH_MAX];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof p)
    return tbe_error(TBE_EINVAL, "dir", -1, "directory path is empty or too long");
  memcpy(p, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != '\0')
      continue;
    char keep = p[i];
    p[i] = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
      return tbe_error(TBE_EIO, "dir", -1, "cannot create directory %s: %s", p, strerror(errno));
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
      return tbe_error(TBE_EIO, "dir", -1, "%s exists and is not a directory", p);
    p[i] = keep;
  }
  return tbe_ok();
}

static npy_dtype export_npy_float(tbe_dtype t)
{
  return t == TBE_FP32 ? NPY_F4 : t == TBE_FP16 ? NPY_F2 : NPY_U2;
}

static npy_dtype export_npy_index(tbe_itype t) { return t == TBE_I32 ? NPY_I4 : NPY_I8; }

/* Writes dir/name.npy, 1-D of n elements (or 2-D n x m when m > 0). */
static tbe_status export_array(const char *dir, const char *name, npy_dtype t, int64_t n,
                               int64_t m, const void *data)
{
  char path[EXPORT_PATH_MAX];
  if (snprintf(path, sizeof path, "%s/%s.npy", dir, name) >= (int)sizeof path)
    return tbe_error(TBE_EINVAL, "dir", -1, "path %s/%s.npy is too long", dir, name);
  int64_t shape[2] = {n, m};
  return npy_write(path, t, m > 0 ? 2 : 1, shape, data);
}

/* Writes s as a JSON string literal. */
static void export_json_string(FILE *f, const char *s)
{
  fputc('"', f);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\')
      fprintf(f, "\\%c", *c);
    else if (*c < 0x20 || *c == 0x7f)
      fprintf(f, "\\u%04x", *c);
    else
      fputc(*c, f);
  }
  fputc('"', f);
}

/* The backward's keys of the manifest (bref: how ref_backward went, or ran = 0). */
static void export_manifest_bwd(FILE *f, const tbe_batch *b, const ref_bwd_config *c, int ran,
                                tbe_status bref)
{
  const ref_opt_config *o = &c->opt;
  fprintf(f,
          ",\n  \"opt\": \"%s\", \"lr\": %.17g, \"eps\": %.17g, \"wd\": \"%s\","
          " \"lambda\": %.17g, \"clip\": %.17g,\n  \"sr\": %d, \"step\": %u, \"seed\": %llu,"
          " \"bwd_threshold\": %lld, \"bwd_chunk\": %lld, \"bwd_combine\": \"%s\","
          " \"rows\": %lld,\n  \"ref_backward\": ",
          ref_opt_name(o->kind), (double)o->lr, (double)o->eps, ref_wd_name(o->wd),
          (double)o->lambda, (double)c->clip, o->sr, (unsigned)o->step,
          (unsigned long long)o->seed, (long long)c->threshold, (long long)c->chunk,
          c->combine == REF_COMBINE_ATOMIC ? "atomic" : "deterministic",
          (long long)ref_bwd_rows(b));
  export_json_string(f, !ran ? "not run" : tbe_code_name(bref.code));
  if (ran && bref.code != TBE_OK) {
    fputs(", \"ref_backward_message\": ", f);
    export_json_string(f, bref.message);
  }
}

static tbe_status export_manifest(const char *dir, const char *canon, const tbe_batch *b,
                                  const tbe_layout *l, tbe_bounds_mode mode, tbe_status ref,
                                  int64_t warnings, const gen_bwd *bwd, int bwd_ran,
                                  tbe_status bref)
{
  char path[EXPORT_PATH_MAX];
  if (snprintf(path, sizeof path, "%s/manifest.json", dir) >= (int)sizeof path)
    return tbe_error(TBE_EINVAL, "dir", -1, "path %s/manifest.json is too long", dir);
  FILE *f = fopen(path, "w");
  if (!f)
    return tbe_error(TBE_EIO, "manifest", -1, "cannot create %s: %s", path, strerror(errno));
  fputs("{\n  \"case\": ", f);
  export_json_string(f, canon);
  fprintf(f,
          ",\n  \"num_tables\": %d, \"T\": %d, \"B\": %d, \"R\": %d,\n"
          "  \"wdtype\": \"%s\", \"out_dtype\": \"%s\", \"itype\": \"%s\", \"pool\": \"%s\","
          " \"weighted\": %d, \"bounds\": \"%s\",\n"
          "  \"N\": %lld, \"total_B\": %lld, \"out_elems\": %lld,\n"
          "  \"ref_status\": ",
          b->num_tables, b->T, b->B, b->R, tbe_dtype_name(b->wdtype),
          tbe_dtype_name(b->out_dtype), tbe_itype_name(b->itype), tbe_pool_name(b->pool),
          b->per_sample_weights != NULL, tbe_bounds_name(mode), (long long)b->N,
          (long long)l->total_B, (long long)l->out_elems);
  export_json_string(f, tbe_code_name(ref.code));
  fprintf(f, ", \"ref_warnings\": %lld", (long long)warnings);
  if (ref.code != TBE_OK) {
    fputs(",\n  \"ref_message\": ", f);
    export_json_string(f, ref.message);
  }
  if (ref.code == TBE_EBOUNDS)
    fprintf(f,
            ",\n  \"ref_feature\": %lld, \"ref_bag\": %lld, \"ref_position\": %lld,"
            " \"ref_value\": %lld",
            (long long)ref.feature, (long long)ref.bag, (long long)ref.position,
            (long long)ref.value);
  if (bwd)
    export_manifest_bwd(f, b, bwd->cfg, bwd_ran, bref);
  fputs("\n}\n", f);
  int bad = ferror(f);
  int err = errno;
  if (fclose(f) != 0 && !bad) {
    bad = 1;
    err = errno;
  }
  if (bad)
    return tbe_error(TBE_EIO, "manifest", -1, "cannot write %s: %s", path, strerror(err));
  return tbe_ok();
}

/* The generated inputs, before the bounds check touches them. */
static tbe_status export_inputs(const char *dir, const tbe_batch *b, int64_t total_B)
{
  tbe_status s = export_array(dir, "weights", export_npy_float(b->wdtype),
                              b->table_offset[b->num_tables], 0, b->weights);
  if (s.code == TBE_OK)
    s = export_array(dir, "table_offset", NPY_I8, b->num_tables + 1, 0, b->table_offset);
  if (s.code == TBE_OK)
    s = export_array(dir, "E", NPY_I8, b->num_tables, 0, b->E);
  if (s.code == TBE_OK)
    s = export_array(dir, "D", NPY_I4, b->num_tables, 0, b->D);
  if (s.code == TBE_OK)
    s = export_array(dir, "feature_table_map", NPY_I4, b->T, 0, b->feature_table_map);
  if (s.code == TBE_OK && b->R > 0)
    s = export_array(dir, "B_vbe", NPY_I4, b->T, b->R, b->B_vbe);
  if (s.code == TBE_OK)
    s = export_array(dir, "indices", export_npy_index(b->itype), b->N, 0, b->indices);
  if (s.code == TBE_OK)
    s = export_array(dir, "offsets", export_npy_index(b->itype), total_B + 1, 0, b->offsets);
  if (s.code == TBE_OK && b->per_sample_weights)
    s = export_array(dir, "per_sample_weights", NPY_F4, b->N, 0, b->per_sample_weights);
  return s;
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
    s = export_array(dir, "ref_weights_exact", NPY_F8, n, 0, we);
    if (s.code == TBE_OK)
      s = export_array(dir, "ref_weights_bound", NPY_F8, n, 0, wb);
    if (s.code == TBE_OK && me)
      s = export_array(dir, "ref_momentum_exact", NPY_F8, rows, 0, me);
    if (s.code == TBE_OK && mb)
      s = export_array(dir, "ref_momentum_bound", NPY_F8, rows, 0, mb);
  }
  if (bref->code == TBE_OK && s.code == TBE_OK) {
    s = export_array(dir, "ref_weights", export_npy_float(b->wdtype), n, 0, w);
    if (s.code == TBE_OK && m)
      s = export_array(dir, "ref_momentum", NPY_F4, rows, 0, m);
    if (s.code == TBE_OK && psw)
      s = export_array(dir, "ref_psw_grad", NPY_F4, b->N, 0, psw);
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
  memset(&l, 0, sizeof l);
  tbe_status s = export_mkdir_p(dir);
  if (s.code == TBE_OK)
    s = export_inputs(dir, b, tbe_total_B(b));
  if (s.code == TBE_OK)
    s = tbe_layout_init(&l, b);
  if (s.code == TBE_OK && bwd)
    s = export_array(dir, "grad_output", export_npy_float(b->out_dtype), l.out_elems, 0,
                     bwd->grad_output);
  if (s.code == TBE_OK && bwd && bwd->momentum)
    s = export_array(dir, "momentum", NPY_F4, ref_bwd_rows(b), 0, bwd->momentum);
  if (s.code != TBE_OK) {
    tbe_layout_free(&l);
    return s;
  }
  tbe_status bref = tbe_ok();
  int bwd_ran = 0;

  int64_t warnings = 0;
  tbe_status ref = ref_bounds_check(b, &l, mode, &warnings);
  s = export_array(dir, "ref_indices", export_npy_index(b->itype), b->N, 0, b->indices);
  if (s.code == TBE_OK)
    s = export_array(dir, "ref_offsets", export_npy_index(b->itype), l.total_B + 1, 0, b->offsets);
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
      s = export_array(dir, "ref_output", export_npy_float(b->out_dtype), l.out_elems, 0, out);
  }
  if (s.code == TBE_OK && ref.code == TBE_OK && bwd) {
    bwd_ran = 1;
    s = export_backward(dir, b, &l, bwd, &bref);
  }
  if (s.code == TBE_OK)
    s = export_manifest(dir, canon, b, &l, mode, ref, warnings, bwd, bwd_ran, bref);

done:
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
