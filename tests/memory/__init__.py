"""The in-memory backend (memory://): sharing, lifetime, waits, migrate."""
