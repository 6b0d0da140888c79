/* cmd_files.c: the commands that write files: merge (databases into one) and export (a case's
 * inputs and the reference's results as .npy). Not the database (store/db.c) nor export.c.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd_files.h"
#include "options.h"
#include "session.h"
#include "export.h"

static const char export_usage[] =
    "usage: tbecheck export CASE|CASEFILE DIR [--force] [--max-memory SIZE]\n"
    "Writes a case's inputs and the reference's results as .npy files and manifest.json into\n"
    "DIR (a case file: one case per DIR/NNNN), for the NumPy oracle or another system. Every\n"
    "case is parsed and its memory estimated before anything is written. DIR must be empty or\n"
    "new; --force first removes an earlier export there (its .npy files, manifest.json and\n"
    "NNNN directories) and refuses a directory that holds anything else.\n";

static const char merge_usage[] =
    "usage: tbecheck merge OUT.db IN.db ...\n"
    "Copies into OUT.db (created if missing) every run of each IN.db that it does not hold yet,\n"
    "with its results; merging the same file twice adds nothing.\n";


/* ---- merge, export, random ---- */

int cmd_merge(int argc, char **argv)
{
  static const int allowed[] = {0};
  cli_options o;
  int rc = parse_options(argc, argv, merge_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  if (argc - optind < 2)
    return usage_error(merge_usage);
  db *d;
  tbe_status st = tbe_ok();
  /* every input is checked before the output is opened (or created): a bad one refuses the
   * whole merge and writes nothing */
  for (int a = optind + 1; st.code == TBE_OK && a < argc; a++) {
    st = db_open(argv[a], DB_READ, &d);
    if (st.code == TBE_OK)
      db_close(d);
  }
  if (st.code != TBE_OK)
    return fail_with(st);
  st = db_open(argv[optind], DB_WRITE, &d);
  for (int a = optind + 1; st.code == TBE_OK && a < argc; a++) {
    int added, open_runs;
    st = db_merge(d, argv[a], &added, &open_runs);
    if (st.code == TBE_OK && open_runs)
      printf("%s: %d run%s added, %d incomplete (stopped before its end: its stored cases are "
             "kept, the rest never ran)\n",
             argv[a], added, added == 1 ? "" : "s", open_runs);
    else if (st.code == TBE_OK)
      printf("%s: %d run%s added\n", argv[a], added, added == 1 ? "" : "s");
  }
  db_close(d);
  return st.code == TBE_OK ? EXIT_PASS : fail_with(st);
}

/* 1 if name is what an export writes into a directory: *.npy or manifest.json. */
static int export_file_name(const char *name)
{
  size_t n = strlen(name);
  return !strcmp(name, "manifest.json") || (n > 4 && !strcmp(name + n - 4, ".npy"));
}

/* Removes the export files in dir (all of them, only if every entry is one; a subdirectory
 * counts when `nested` and it is named NNNN and holds only export files itself), or with
 * dry_run only checks. Returns -1, or an exit code after naming what is in the way. */
static int clear_export(const char *dir, int nested, int dry_run)
{
  DIR *d = opendir(dir);
  if (!d) {
    say_error("cannot read directory %s: %s", dir, strerror(errno));
    return EXIT_USAGE;
  }
  int rc = -1;
  struct dirent *e;
  while (rc < 0 && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    int is_dir = lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
    int numbered = strlen(e->d_name) == 4 && strspn(e->d_name, "0123456789") == 4;
    if (is_dir && nested && numbered)
      rc = clear_export(path, 0, dry_run);
    else if (is_dir || !S_ISREG(st.st_mode) || !export_file_name(e->d_name)) {
      say_error("%s is not from an earlier export; --force replaces only an export's files "
                "(*.npy, manifest.json, NNNN/): choose another directory", path);
      rc = EXIT_USAGE;
    }
    if (rc < 0 && !dry_run && (is_dir ? rmdir(path) : unlink(path)) != 0) {
      say_error("cannot remove %s: %s", path, strerror(errno));
      rc = EXIT_INTERNAL;
    }
  }
  closedir(d);
  return rc;
}

/* An export writes only into a new or empty directory, or with --force over an earlier export
 * (which it removes first, so no file of it is left beside the new one). */
static int prepare_export_dir(const char *dir, int force)
{
  struct stat st;
  if (stat(dir, &st) != 0)
    return -1; /* export creates it */
  if (!S_ISDIR(st.st_mode)) {
    say_error("%s exists and is not a directory", dir);
    return EXIT_USAGE;
  }
  DIR *d = opendir(dir);
  struct dirent *e;
  int empty = 1;
  while (d && empty && (e = readdir(d)))
    empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
  if (d)
    closedir(d);
  if (empty)
    return -1;
  if (!force) {
    say_error("%s is not empty: export writes into a new or empty directory (--force replaces "
              "an earlier export there)", dir);
    return EXIT_USAGE;
  }
  int rc = clear_export(dir, 1, 1);
  return rc >= 0 ? rc : clear_export(dir, 1, 0);
}

int cmd_export(int argc, char **argv)
{
  static const int allowed[] = {OPT_FORCE, OPT_MAXMEM, 0};
  cli_options o;
  int rc = parse_options(argc, argv, export_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  if (argc - optind != 2)
    return usage_error(export_usage);
  char *what = argv[optind], *dir = argv[optind + 1];
  if (!strcmp(what, "-")) {
    say_error("export takes a case or a case file, not '-': it reads the file twice (to check "
              "every case, then to write it); save the cases to a file first");
    return EXIT_USAGE;
  }
  if ((rc = check_output_path(dir, 1, "export directory")) >= 0)
    return rc;
  parsed_case *all = NULL;
  int64_t n = 0;
  rc = collect_cases(1, &what, &all, &n);
  o.eng.engines = 1u << ENG_REF;
  for (int64_t i = 0; rc < 0 && i < n; i++) /* every case must generate before one is written */
    rc = check_memory(all[i].c, all[i].canon, &o);
  for (int64_t i = 0; rc < 0 && i < n; i++) {
    tbe_batch b;
    gen_bwd bwd;
    tbe_status st = gen_case(all[i].c, &b, &bwd);
    if (st.code == TBE_OK)
      gen_case_free(&b, &bwd);
    else {
      say_error("case '%.200s' cannot be generated: %s", all[i].canon, st.message);
      rc = st.code == TBE_EINVAL ? EXIT_USAGE : EXIT_INTERNAL;
    }
  }
  if (rc < 0)
    rc = prepare_export_dir(dir, o.force);
  int count = 1;
  if (rc < 0) {
    tbe_status st = is_case_text(what) ? export_case(what, dir) : export_file(what, dir, &count);
    rc = st.code == TBE_OK ? EXIT_PASS : fail_with(st);
  }
  free_cases(all, n);
  if (rc == EXIT_PASS)
    fprintf(stderr, "exported %d case(s) to %s\n", count, dir);
  return rc;
}

