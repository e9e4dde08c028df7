"""Tests that what the documentation shows runs: the examples (and, after the move, the README)."""
