"""Tests of the repository's tools: check_deps, build_pyz, the benchmarks, make.py."""
