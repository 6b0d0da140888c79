/* cmd_run.h: run, import and replay: the commands that run cases through the engines; each takes its own argv (argv[0] is the
 * command's name) and returns the exit code (options.h). Not their shared parts.
 */
#ifndef HARNESS_CMD_RUN_H
#define HARNESS_CMD_RUN_H

int cmd_run(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_replay(int argc, char **argv);

#endif
