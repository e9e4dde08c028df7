"""The example's tasks: ordinary `django.tasks` tasks, run by `manage.py nobroker_work`,
and one of nobroker's own (`@site.task`), run by `manage.py nobroker_work --registered`.
This module is imported when Django starts (the nobroker.django app autodiscovers each
installed app's tasks module), so `site`'s registry is filled in every process."""

from django.conf import settings
from django.tasks import task

from nobroker import Queue

from .models import Order

site = Queue(settings.SITE_JOBS, "site")  # nobroker's API beside Django's


@task
def pay(order_id: int) -> str:
    """Marks the order paid: a worker's database write, committed by the task."""
    order = Order.objects.get(pk=order_id)  # DoesNotExist if enqueued before the commit
    order.paid = True
    order.save()
    return f"paid {order.item}"


@task(max_attempts=2)
def flaky(order_id: int) -> str:
    """Fails every attempt: two attempts, two errors, then FAILED."""
    Order.objects.filter(pk=order_id).update(attempts=Order.objects.get(pk=order_id).attempts + 1)
    raise ConnectionError(f"payment provider down for order {order_id}")


@task(takes_context=True, queue_name="emails", priority=10)
def receipt(context, order_id: int) -> dict:
    """Runs on the emails queue; shows what the context carries."""
    return {"order": order_id, "attempt": context.attempt, "id": context.task_result.id}


@task
async def total(numbers: list[int]) -> int:
    """An async task function: the worker runs it on an event loop."""
    return sum(numbers)


@site.task(max_attempts=3)
def restock(order_id: int) -> str:
    """nobroker's own task API under Django: enqueued by `restock.delay_on_commit(...)`,
    so it never runs before the order it reads is committed."""
    order = Order.objects.get(pk=order_id)
    return f"restocked {order.item}"


@site.periodic(cron="0 3 * * *", priority=-10)
def unpaid_report() -> dict:
    """A periodic task: every night at 03:00 UTC, run once however many workers serve
    `site` (each tick's job id is its key). A worker started later runs the latest
    night's missed tick; its priority keeps it behind the shop's own work."""
    return {"unpaid": Order.objects.filter(paid=False).count()}
