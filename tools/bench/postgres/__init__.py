"""nobroker on PostgreSQL against procrastinate and PgQueuer (make.py bench-postgres)."""
