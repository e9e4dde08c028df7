from django.urls import include, path
from shop import views

urlpatterns = [
    path("orders/", views.place_order),
    path("orders/<int:order_id>/", views.order),
    path("orders/<int:order_id>/restock/", views.restock_after),
    path("jobs/", include("nobroker.django.urls")),  # the dashboard, for staff users
]
