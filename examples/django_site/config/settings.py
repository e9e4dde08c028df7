"""Settings of the example site: a shop whose orders are paid by a nobroker task.

The queue directory and the SQLite file default to folders beside this one;
the tests point them elsewhere with NOBROKER_EXAMPLE_JOBS and NOBROKER_EXAMPLE_DB.
With NOBROKER_EXAMPLE_POSTGRES (a postgresql:// URL) the site runs on PostgreSQL
instead, its jobs in the same database (OPTIONS "database"), in the schema
NOBROKER_EXAMPLE_SCHEMA (default: nobroker): a job then commits with the order.
"""

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

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
    "django.contrib.sessions",
    "nobroker.django",  # the worker command, delay_on_commit, tasks.py autodiscovery
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "config.urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

POSTGRES = os.environ.get("NOBROKER_EXAMPLE_POSTGRES")
if POSTGRES:
    url = urlsplit(POSTGRES)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": url.path.lstrip("/"),
            "USER": unquote(url.username or ""),
            "PASSWORD": unquote(url.password or ""),
            "HOST": url.hostname or "",
            "PORT": str(url.port or ""),
        }
    }
    # The jobs in the same database, written on Django's connection.
    SCHEMA = os.environ.get("NOBROKER_EXAMPLE_SCHEMA", "nobroker")
    WHERE = {"database": "default", "schema": SCHEMA}
    SITE_JOBS = f"{POSTGRES}?schema={SCHEMA}"  # shop/tasks.py's own nobroker Queue
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("NOBROKER_EXAMPLE_DB", str(BASE_DIR / "db.sqlite3")),
        }
    }
    # A queue directory: a job is written when the order's transaction commits.
    WHERE = {"location": os.environ.get("NOBROKER_EXAMPLE_JOBS", str(BASE_DIR / "jobs"))}
    SITE_JOBS = WHERE["location"]  # shop/tasks.py's own nobroker Queue

TASKS = {
    "default": {
        "BACKEND": "nobroker.django.NobrokerBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            **WHERE,
            "max_attempts": 3,
            "backoff": BackoffPolicy(base=0.05, jitter=0),
        },
    }
}
if os.environ.get("NOBROKER_EXAMPLE_VISIBILITY"):  # the tests' short leases
    TASKS["default"]["OPTIONS"]["visibility_timeout"] = float(
        os.environ["NOBROKER_EXAMPLE_VISIBILITY"])
