/* cmd_results.h: list, show and report: the commands that read the results database; each takes its own argv (argv[0] is the
 * command's name) and returns the exit code (options.h). Not their shared parts.
 */
#ifndef HARNESS_CMD_RESULTS_H
#define HARNESS_CMD_RESULTS_H

int cmd_list(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_report(int argc, char **argv);

#endif
