"""An exactly-once task: needs the PostgreSQL settings (NOBROKER_EXAMPLE_POSTGRES), where
the backend has OPTIONS "database" and `atomic=True` is allowed (refused elsewhere when
the task is declared, so this module is imported only there)."""

from django.tasks import task

from .models import Shipment


@task(atomic=True, takes_context=True)
def ship(context, order_id: int) -> str:
    """The shipment row and the job's completion commit in one transaction: a worker
    killed at any point leaves both or neither, and a rerun never ships twice."""
    shipment = Shipment.objects.create(order_id=order_id, job_id=context.task_result.id)
    if shipment.order.item == "lost parcel":  # the row above is rolled back with the error
        raise LookupError(f"order {order_id}: the parcel is lost")
    return f"shipped order {order_id}"
