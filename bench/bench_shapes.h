/* bench_shapes.h: the benchmarks' shapes, read by name from cases/bench.cases, the one workload
 * file every bench program and peer script reads. Not a case parser (harness/case/case.h).
 */
#ifndef BENCH_SHAPES_H
#define BENCH_SHAPES_H

/* The case text of the shape `name` (the line of cases/bench.cases whose comment starts with
 * "name:"), followed by `extra` (NULL, or key=value tokens to append). malloc'd; the program
 * exits with status 2, naming the file, when there is no such line. */
char *bench_shape(const char *name, const char *extra);

/* The names of the shapes whose name (a line's comment up to its colon) starts with `prefix`,
 * in file order: *count malloc'd strings in a malloc'd array, for bench_shape_names_free. The
 * program exits with status 2 when there is none. */
char **bench_shape_names(const char *prefix, int *count);
void bench_shape_names_free(char **names, int count);

/* Whether the shape `name` is one of `only`'s comma-separated names (a bench's --only list);
 * every shape is when `only` is NULL. */
int bench_wanted(const char *only, const char *name);

#endif
