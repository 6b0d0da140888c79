/* main.c: the tbecheck program: its usage, the dispatch to each command, --version and random.
 * Not the commands themselves (cmd_*.c, fuzz_campaign.c, race.c) nor their shared parts (cli.h).
 * To add a command: its usage text and cmd_ function in a cmd_*.c, and one line in `commands`.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "case_random.h"
#include "cmd_files.h"
#include "cmd_results.h"
#include "cmd_run.h"
#include "options.h"
#include "fuzz_campaign.h"
#include "race.h"
#include "runinfo.h"

static const char usage_text[] =
    "usage: tbecheck <command> [options] [arguments]      (tbecheck <command> --help)\n"
    "\n"
    "commands:\n"
    "  run [CASEFILE|CASE ...]    run cases through the engines, compare, store every outcome\n"
    "  replay ID|CASE             rerun one case: each comparison and its first violations\n"
    "  list [--failed] [--run N]  results of a run (default: the last)\n"
    "  show RESULT_ID             one result in full, with its violations\n"
    "  report [--run N] [--html FILE]  a run's summary, drift across commits, speed\n"
    "  import DIR                 run a captured batch given as .npy files\n"
    "  export CASE|CASEFILE DIR   write a case's inputs and reference outputs as .npy files\n"
    "  merge OUT.db IN.db ...     fold databases (e.g. shards) into one\n"
    "  random N SEED              print N random valid cases (--path small: of the small-table\n"
    "                             path alone)\n"
    "  --version                  version, commit, build type, CUDA on or off, planted fault\n"
    "  fuzz [--seconds S]         differential campaign over the edge space, failures shrunk\n"
    "  race [--seconds S]         the GPU backward launched again and again under varying\n"
    "                             schedules, every launch held to the reference's bits\n"
    "\n"
    "A CASE is one line of key=value tokens (README.md), quoted as one argument; an argument\n"
    "without '=' is a case file (one case per line, '#' comments). The database is\n"
    "./" DEFAULT_DB " unless --db says otherwise; run and import create it.\n"    "run, fuzz and race take --gpus all|N or --gpu-ids I,J,...: one worker per local GPU,\n"
    "merged into one database (README.md).\n"
    "\n"
    "engines: ref (the CPU reference; always runs, it is the baseline), gpu (CUDA), oracle\n"
    "(NumPy). Normative outputs are compared bit for bit with ref; others (the GPU small-table\n"
    "path) with the exact forward within the derived bound. An engine that cannot run here is\n"
    "recorded as skip, with the reason, never as pass.\n"
    "\n"
    "environment: TBECHECK_PYTHON  the Python interpreter of the oracle engine\n"
    "\n"
    "exit codes: 0 all passed (skips do not fail), 1 failures found, 2 bad usage or bad\n"
    "            input (options, cases, files or databases that are missing or wrong, a run or\n"
    "            result that does not exist, a case too big for this machine), 3 I/O or\n"
    "            internal error while working (a failed write, a full disk)\n";

static const char random_usage[] =
    "usage: tbecheck random N SEED [--path small]   (integers 0 .. 2^63-1)\n"
    "  --path small: only cases whose every feature takes the small-table tensor-core path\n";


static int cmd_random(int argc, char **argv)
{
  static const int allowed[] = {OPT_PATH, 0};
  cli_options o;
  int rc = parse_options(argc, argv, random_usage, allowed, &o);
  if (rc >= 0)
    return rc;
  long long v[2];
  if (argc - optind != 2)
    return usage_error(random_usage);
  for (int i = 0; i < 2; i++)
    if (parse_int(argv[optind + i], 0, INT64_MAX, &v[i])) {
      say_error("bad %s '%s': expected an integer 0 .. 2^63-1", i ? "SEED" : "N",
                argv[optind + i]);
      return usage_error(random_usage);
    }
  long long n = v[0], seed = v[1];
  char buf[4096];
  for (long long i = 0; i < n; i++) {
    (o.small_path ? case_random_small : case_random)((uint64_t)seed, (uint64_t)i, buf,
                                                     sizeof buf);
    puts(buf);
  }
  return EXIT_PASS;
}

/* tbecheck --version: the version, the commit of the source tree it was built from (read now,
 * as a run records it), the build type, and whether CUDA was built in. */
static int print_version(void)
{
  runinfo ri;
  runinfo_collect(&ri);
  printf("tbecheck %s\n", TBE_VERSION);
  if (ri.git_commit[0])
    printf("commit   %s%s\n", ri.git_commit, ri.dirty == 1 ? " (dirty tree)" : "");
  else
    printf("commit   unknown (%s is not a git checkout)\n", TBE_SOURCE_DIR);
  printf("build    %s\n", TBE_BUILD_TYPE[0] ? TBE_BUILD_TYPE : "(no CMAKE_BUILD_TYPE)");
  if (TBE_CUDA_VERSION[0])
    printf("CUDA     on (toolkit %s)\n", TBE_CUDA_VERSION);
  else if (TBE_CUDA_OPTION_OFF)
    printf("CUDA     off (TBE_CUDA=OFF: the gpu engine skips)\n");
  else
    printf("CUDA     off (no CUDA compiler was found: the gpu engine skips)\n");
#if defined(TBE_FAULT_NAME)
  printf("fault    %s (planted on purpose: this build is wrong, fuzz/FAULTS.md)\n", TBE_FAULT_NAME);
#endif
  return EXIT_PASS;
}

static int race_cmd(int argc, char **argv)
{
  return race_command(argc, argv, TBE_VERSION, TBE_CUDA_VERSION[0] ? TBE_CUDA_VERSION : NULL);
}

int main(int argc, char **argv)
{
  signal(SIGPIPE, SIG_IGN); /* a dead oracle worker is an error, not our end */
  signal(SIGXFSZ, SIG_IGN); /* a file size limit is a write error (EFBIG), reported */
  static const struct {
    const char *name;
    int (*fn)(int, char **);
  } commands[] = { /* one line per command */
    {"run", cmd_run},
    {"replay", cmd_replay},
    {"list", cmd_list},
    {"show", cmd_show},
    {"report", cmd_report},
    {"import", cmd_import},
    {"export", cmd_export},
    {"merge", cmd_merge},
    {"random", cmd_random},
    {"fuzz", fuzz_command},
    {"race", race_cmd},
  };
  if (argc < 2)
    return usage_error(usage_text);
  const char *cmd = argv[1];
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    fputs(usage_text, stdout);
    return EXIT_PASS;
  }
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "version"))
    return print_version();
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(cmd, commands[i].name)) {
      command_name = cmd;
      return commands[i].fn(argc - 1, argv + 1);
    }
  fprintf(stderr, "tbecheck: unknown command '%s'\n\n", cmd);
  return usage_error(usage_text);
}

