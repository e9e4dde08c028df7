from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    paid = models.BooleanField(default=False)
    attempts = models.IntegerField(default=0)


class Shipment(models.Model):
    """Written by the atomic task `shop.atomic_tasks.ship`: one row per job that
    completed, never two (PostgreSQL with OPTIONS "database")."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE)
    job_id = models.CharField(max_length=100)
