/* batch_files.c: a batch's inputs as .npy files and its manifest.json (batch_files.h says what
 * each holds). Not the reference's results (store/export.c) nor the reader (store/import.c).
 */
#include "batch_files.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "backward.h"

#define BATCH_PATH_MAX 4096

/* mkdir -p: creates dir and each missing parent; fails if a component is not a directory. */
static tbe_status batch_mkdir_p(const char *dir)
{
  char p[BATCH_PATH_MAX];
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

tbe_status batch_files_array(const char *dir, const char *name, npy_dtype t, int64_t n, int64_t m,
                             const void *data)
{
  char path[BATCH_PATH_MAX];
  if (snprintf(path, sizeof path, "%s/%s.npy", dir, name) >= (int)sizeof path)
    return tbe_error(TBE_EINVAL, "dir", -1, "path %s/%s.npy is too long", dir, name);
  int64_t shape[2] = {n, m};
  return npy_write(path, t, m > 0 ? 2 : 1, shape, data);
}

void batch_files_json_string(FILE *f, const char *s)
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

tbe_status batch_files_inputs(const char *dir, const tbe_batch *b, const tbe_layout *l,
                              const gen_bwd *bwd)
{
  tbe_status s = batch_mkdir_p(dir);
  if (s.code == TBE_OK)
    s = batch_files_array(dir, "weights", npy_of_float(b->wdtype), b->table_offset[b->num_tables],
                          0, b->weights);
  if (s.code == TBE_OK)
    s = batch_files_array(dir, "table_offset", NPY_I8, b->num_tables + 1, 0, b->table_offset);
  if (s.code == TBE_OK)
    s = batch_files_array(dir, "E", NPY_I8, b->num_tables, 0, b->E);
  if (s.code == TBE_OK)
    s = batch_files_array(dir, "D", NPY_I4, b->num_tables, 0, b->D);
  if (s.code == TBE_OK)
    s = batch_files_array(dir, "feature_table_map", NPY_I4, b->T, 0, b->feature_table_map);
  if (s.code == TBE_OK && b->R > 0)
    s = batch_files_array(dir, "B_vbe", NPY_I4, b->T, b->R, b->B_vbe);
  if (s.code == TBE_OK)
    s = batch_files_array(dir, "indices", npy_of_index(b->itype), b->N, 0, b->indices);
  if (s.code == TBE_OK)
    s = batch_files_array(dir, "offsets", npy_of_index(b->itype), l->total_B + 1, 0, b->offsets);
  if (s.code == TBE_OK && b->per_sample_weights)
    s = batch_files_array(dir, "per_sample_weights", NPY_F4, b->N, 0, b->per_sample_weights);
  if (s.code == TBE_OK && bwd)
    s = batch_files_array(dir, "grad_output", npy_of_float(b->out_dtype), l->out_elems, 0,
                          bwd->grad_output);
  if (s.code == TBE_OK && bwd && bwd->momentum)
    s = batch_files_array(dir, "momentum", NPY_F4, ref_bwd_rows(b), 0, bwd->momentum);
  return s;
}

/* The backward's keys of the manifest. */
static void batch_manifest_bwd(FILE *f, const tbe_batch *b, const ref_bwd_config *c)
{
  const ref_opt_config *o = &c->opt;
  fprintf(f,
          ",\n  \"opt\": \"%s\", \"lr\": %.17g, \"eps\": %.17g, \"wd\": \"%s\","
          " \"lambda\": %.17g, \"clip\": %.17g,\n  \"sr\": %d, \"step\": %u, \"seed\": %llu,"
          " \"bwd_threshold\": %lld, \"bwd_chunk\": %lld, \"bwd_combine\": \"%s\","
          " \"rows\": %lld",
          ref_opt_name(o->kind), (double)o->lr, (double)o->eps, ref_wd_name(o->wd),
          (double)o->lambda, (double)c->clip, o->sr, (unsigned)o->step,
          (unsigned long long)o->seed, (long long)c->threshold, (long long)c->chunk,
          c->combine == REF_COMBINE_ATOMIC ? "atomic" : "deterministic",
          (long long)ref_bwd_rows(b));
}

tbe_status batch_files_manifest(const char *dir, const char *canon, const tbe_batch *b,
                                const tbe_layout *l, tbe_bounds_mode mode, const gen_bwd *bwd,
                                const char *more)
{
  char path[BATCH_PATH_MAX];
  if (snprintf(path, sizeof path, "%s/manifest.json", dir) >= (int)sizeof path)
    return tbe_error(TBE_EINVAL, "dir", -1, "path %s/manifest.json is too long", dir);
  FILE *f = fopen(path, "w");
  if (!f)
    return tbe_error(TBE_EIO, "manifest", -1, "cannot create %s: %s", path, strerror(errno));
  fputs("{\n  \"case\": ", f);
  batch_files_json_string(f, canon);
  fprintf(f,
          ",\n  \"num_tables\": %d, \"T\": %d, \"B\": %d, \"R\": %d,\n"
          "  \"wdtype\": \"%s\", \"out_dtype\": \"%s\", \"itype\": \"%s\", \"pool\": \"%s\","
          " \"weighted\": %d, \"bounds\": \"%s\",\n"
          "  \"N\": %lld, \"total_B\": %lld, \"out_elems\": %lld",
          b->num_tables, b->T, b->B, b->R, tbe_dtype_name(b->wdtype),
          tbe_dtype_name(b->out_dtype), tbe_itype_name(b->itype), tbe_pool_name(b->pool),
          b->per_sample_weights != NULL, tbe_bounds_name(mode), (long long)b->N,
          (long long)l->total_B, (long long)l->out_elems);
  if (bwd)
    batch_manifest_bwd(f, b, bwd->cfg);
  if (more)
    fputs(more, f);
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
