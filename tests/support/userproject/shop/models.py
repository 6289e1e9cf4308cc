from django.db import models

from django_sequences.fields import SequenceField


class Customer(models.Model):
    code = SequenceField(sequence="shop.customer", max_length=6)
    name = models.CharField(max_length=50)

    def __str__(self) -> str:
        return self.code


class Order(models.Model):
    number = SequenceField(sequence="shop.order", max_length=15)
    customer = models.CharField(max_length=50)

    def __str__(self) -> str:
        return self.number


class Invoice(models.Model):
    order = models.ForeignKey(Order, on_delete=models.PROTECT)
    number = SequenceField(sequence="shop.invoice", max_length=12)

    def __str__(self) -> str:
        return self.number
