"""Celery on nobroker: a real Celery app and `celery worker` processes on a nobroker
directory (run by `python make.py test-celery`, which installs Celery into
.dev/celery-venv; without Celery every test here is skipped, loudly)."""
