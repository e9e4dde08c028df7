"""The test harness: what test modules and tools/ share, none of it a test itself.

Test modules and the tools import from here, never from each other (tests/
is on ``sys.path`` when tests/run.py runs a module; tools/__init__.py puts it
there for the tools):

- ``support``: paths (``REPO``, ``SRC``; importing it puts ``src/`` on
  ``sys.path``), ``TempDirTestCase``, ``FakeClock``, ``slow``, child
  processes, ``file_queue``/``store_of``, ``wait_until``.
- ``postgres``: the PostgreSQL suite's server URL, skips and schemas.
- ``explorer``: the crash-state explorer (record a workload, build every
  crash state under a disk model, check each against the replay oracle),
  one module per concern; its package docstring holds the theory.
- ``faults``: the I/O-error injection loop (a FileSystem that fails on cue).
- ``fuzz``: the damaged-log and damaged-NAME.sync fuzzers.
- ``soak``: real producers, workers and a compactor under kill -9, audited.

The short, bounded runs live in tests/file/ (test_explorer, test_faults,
test_fuzz, test_soak...); tools/torture/run.py runs the long ones.
"""
