/* cmd_files.h: merge and export: the commands that write files; each takes its own argv (argv[0] is the
 * command's name) and returns the exit code (options.h). Not their shared parts.
 */
#ifndef HARNESS_CMD_FILES_H
#define HARNESS_CMD_FILES_H

int cmd_merge(int argc, char **argv);
int cmd_export(int argc, char **argv);

#endif
