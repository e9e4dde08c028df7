"""The task layer: the task API, cron and periodic schedules, the Worker running tasks."""
