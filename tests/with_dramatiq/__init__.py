"""Dramatiq on nobroker: a real Dramatiq app and `dramatiq` worker processes on a nobroker
directory (run by `python make.py test-dramatiq`, which installs Dramatiq into
.dev/dramatiq-venv; without Dramatiq every test here is skipped, loudly)."""
