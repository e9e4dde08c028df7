"""Settings of the example site: a shop whose orders are paid by a nobroker task.

The queue directory and the SQLite file default to folders beside this one;
the tests point them elsewhere with NOBROKER_EXAMPLE_JOBS and NOBROKER_EXAMPLE_DB.
"""

import os
from pathlib import Path

from nobroker import BackoffPolicy

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "nobroker.django",
    "shop",
]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "config.urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("NOBROKER_EXAMPLE_DB", str(BASE_DIR / "db.sqlite3")),
    }
}

TASKS = {
    "default": {
        "BACKEND": "nobroker.django.NobrokerBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            "location": os.environ.get("NOBROKER_EXAMPLE_JOBS", str(BASE_DIR / "jobs")),
            "max_attempts": 3,
            "backoff": BackoffPolicy(base=0.05, jitter=0),
        },
    }
}
