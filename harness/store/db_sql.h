/* db_sql.h: the SQL of reports/ as compiled into tbecheck: the build generates db_sql.c from
 * those files (embed_sql.cmake). Not the database code (db.c), which runs them.
 */
#ifndef HARNESS_DB_SQL_H
#define HARNESS_DB_SQL_H

/* The text of reports/<name>.sql as embedded at build time ("schema", "queries/summary"...), or
 * NULL. */
const char *db_sql(const char *name);

#endif
