/* bench_shapes.h: the benchmarks' shapes, read by name from cases/bench.cases, the one workload
 * file every bench program and peer script reads. Not a case parser (harness/case/case.h).
 */
#ifndef BENCH_SHAPES_H
#define BENCH_SHAPES_H

/* The case text of the shape `name` (the line of cases/bench.cases whose comment starts with
 * "name:"), followed by `extra` (NULL, or key=value tokens to append). malloc'd; the program
 * exits with status 2, naming the file, when there is no such line. */
char *bench_shape(const char *name, const char *extra);

#endif
