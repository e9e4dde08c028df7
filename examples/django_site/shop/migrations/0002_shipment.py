from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("shop", "0001_initial")]  # noqa: RUF012 (Django's own shape)
    operations = [  # noqa: RUF012
        migrations.CreateModel(
            name="Shipment",
            fields=[
                ("id", models.AutoField(auto_created=True, primary_key=True, serialize=False,
                                        verbose_name="ID")),
                ("order", models.ForeignKey(on_delete=models.deletion.CASCADE,
                                            to="shop.order")),
                ("job_id", models.CharField(max_length=100)),
            ],
        ),
    ]
