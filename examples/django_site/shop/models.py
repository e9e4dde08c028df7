from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    paid = models.BooleanField(default=False)
    attempts = models.IntegerField(default=0)
