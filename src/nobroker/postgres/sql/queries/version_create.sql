-- Before the first migration: the schema and its version table.
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.schema_version (version integer NOT NULL)
