"""Other projects' test suites run against nobroker (make.py test-celery-suite)."""
