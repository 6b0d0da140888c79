-- upgrade.sql: brings a database of an older schema version to the current one, one step per
-- version, inside the transaction harness/db.c opens. Not the schema (schema.sql) nor a query.
--
-- db.c runs it, in one transaction, on a database whose schema_version is 1 (the only older
-- one), then views.sql. A later version adds its step below, and db.c runs the steps from the
-- database's version on.

-- 1 -> 2: runs.injected. Runs before it recorded --inject-fault only in their arguments.
ALTER TABLE runs ADD COLUMN injected INTEGER NOT NULL DEFAULT 0 CHECK (injected IN (0, 1));
UPDATE runs SET injected = 1 WHERE instr(argv, '--inject-fault') > 0;
UPDATE meta SET schema_version = 2;
