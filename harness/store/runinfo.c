/* runinfo.c: where a run ran, from git, gethostname, /proc/cpuinfo and the NVIDIA driver's
 * /proc file, and the memory left, from /proc/meminfo and the cgroup. Not a system inventory:
 * only what the runs table records and what the memory check of a case compares with.
 */
#include "runinfo.h"

#include <ctype.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The first line of a command's output (without '\n') into buf. Returns -1 if the command
 * failed, 0 if it succeeded silently, 1 if it printed something. */
static int runinfo_command(const char *cmd, char *buf, size_t n)
{
  buf[0] = '\0';
  FILE *p = popen(cmd, "r");
  if (!p)
    return -1;
  int got = fgets(buf, (int)n, p) != NULL;
  while (fgetc(p) != EOF) /* drain, so the command can finish */
    ;
  int rc = pclose(p);
  buf[strcspn(buf, "\n")] = '\0';
  return rc != 0 ? -1 : got;
}

/* The value after "key" and a colon in the first line of file that starts with key. */
static void runinfo_proc_field(const char *file, const char *key, char *buf, size_t n)
{
  buf[0] = '\0';
  FILE *f = fopen(file, "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, key, strlen(key)) != 0 || !colon)
      continue;
    colon += 1 + strspn(colon + 1, " \t");
    colon[strcspn(colon, "\n")] = '\0';
    snprintf(buf, n, "%s", colon);
    break;
  }
  if (f)
    fclose(f);
}

void runinfo_driver_version(const char *nvrm, char *buf, size_t n)
{
  buf[0] = '\0';
  for (const char *w = nvrm; *w; w += strcspn(w, " \t")) {
    w += strspn(w, " \t");
    size_t len = strcspn(w, " \t");
    if (isdigit((unsigned char)w[0]) && memchr(w, '.', len)) {
      snprintf(buf, n, "%.*s", (int)len, w);
      return;
    }
  }
}

void runinfo_collect(runinfo *r)
{
  memset(r, 0, sizeof *r);
  r->dirty = -1;
  char line[256];
  if (runinfo_command("git -C '" TBE_SOURCE_DIR "' rev-parse HEAD 2>/dev/null", line,
                      sizeof line) == 1 &&
      strlen(line) == 40) {
    memcpy(r->git_commit, line, 41);
    r->dirty = runinfo_command("git -C '" TBE_SOURCE_DIR
                               "' status --porcelain --untracked-files=no 2>/dev/null",
                               line, sizeof line);
  }
  if (gethostname(r->host, sizeof r->host - 1) != 0)
    snprintf(r->host, sizeof r->host, "unknown");
  runinfo_proc_field("/proc/cpuinfo", "model name", r->cpu, sizeof r->cpu);
  runinfo_proc_field("/proc/driver/nvidia/version", "NVRM version", line, sizeof line);
  runinfo_driver_version(line, r->driver, sizeof r->driver);
}

/* The first number in file (a whole-file integer such as cgroup's memory.max); -1 when the file
 * is missing or holds no number ("max"). */
static int64_t runinfo_file_number(const char *file)
{
  FILE *f = fopen(file, "r");
  char line[64];
  int got = f && fgets(line, sizeof line, f);
  if (f)
    fclose(f);
  return got && isdigit((unsigned char)line[0]) ? strtoll(line, NULL, 10) : -1;
}

int64_t runinfo_memory_available(const char **source)
{
  char kb[64];
  runinfo_proc_field("/proc/meminfo", "MemAvailable", kb, sizeof kb);
  int64_t avail = isdigit((unsigned char)kb[0]) ? strtoll(kb, NULL, 10) * 1024 : -1;
  *source = "MemAvailable";
  static const struct {
    const char *limit, *usage, *name;
  } cgroups[] = {
    {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "cgroup memory.max"},
    {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
     "cgroup memory.limit_in_bytes"},
  };
  for (size_t i = 0; i < sizeof cgroups / sizeof cgroups[0]; i++) {
    int64_t limit = runinfo_file_number(cgroups[i].limit);
    int64_t used = runinfo_file_number(cgroups[i].usage);
    if (limit < 0 || used < 0)
      continue;
    int64_t left = limit > used ? limit - used : 0;
    if (avail < 0 || left < avail) {
      avail = left;
      *source = cgroups[i].name;
    }
    break;
  }
  return avail;
}
