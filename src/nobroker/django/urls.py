"""The dashboard's URLs, for a site's URLconf: `path("jobs/", include("nobroker.django.urls"))`.

Staff only, Django's authentication and CSRF (dashboard.py). The paths are the
standalone dashboard's, under the prefix the site gives them.
"""

from __future__ import annotations

from django.urls import path

from . import dashboard

app_name = "nobroker"

urlpatterns = [
    path("", dashboard.page, name="page"),
    path("q/<str:queue>", dashboard.page),
    path("q/<str:queue>/job/<str:job>", dashboard.page),
    path("static/<str:name>", dashboard.static),
    path("metrics", dashboard.api_get, {"what": "metrics"}),
    path("api/overview", dashboard.api_get, {"what": "overview"}),
    path("api/events", dashboard.events),
    path("api/queues/<str:name>", dashboard.api_get, {"what": "queue"}),
    path("api/queues/<str:name>/series", dashboard.api_get, {"what": "series"}),
    path("api/queues/<str:name>/jobs", dashboard.api_get, {"what": "jobs"}),
    path("api/queues/<str:name>/jobs/<str:job_id>", dashboard.api_get, {"what": "job"}),
    path("api/queues/<str:name>/jobs/<str:job_id>/records", dashboard.api_get,
         {"what": "records"}),
    path("api/queues/<str:name>/<str:verb>", dashboard.action),
]
