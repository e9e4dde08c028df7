"""A throwaway PostgreSQL server for make.py test-postgres and bench-postgres."""
