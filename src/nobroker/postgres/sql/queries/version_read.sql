SELECT max(version) FROM {schema}.schema_version
