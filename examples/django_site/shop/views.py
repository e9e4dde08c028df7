import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse

from .models import Order
from .tasks import pay, restock


def place_order(request: HttpRequest) -> JsonResponse:
    """POST {"item": ...}: the order and its payment job commit together."""
    data = json.loads(request.body or b"{}")
    with transaction.atomic():
        order = Order.objects.create(item=data.get("item", "book"))
        result = pay.enqueue(order.id)  # written when this block commits
    return JsonResponse({"order": order.id, "task": result.id})


def order(request: HttpRequest, order_id: int) -> JsonResponse:
    found = Order.objects.get(pk=order_id)
    return JsonResponse({"order": found.id, "item": found.item, "paid": found.paid})


def restock_after(request: HttpRequest, order_id: int) -> JsonResponse:
    """POST: a nobroker task enqueued when this request's transaction commits."""
    with transaction.atomic():
        found = Order.objects.select_for_update().get(pk=order_id)
        restock.delay_on_commit(found.id)  # Django's on_commit: nothing if this rolls back
    return JsonResponse({"order": found.id, "restock": "on commit"})
