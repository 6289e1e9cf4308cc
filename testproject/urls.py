from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ids/", include("django_sequences.urls")),
]

# the errors Django answers before (or after) any view, as JSON under /ids/ (docs/http.md)
handler400 = "django_sequences.views.handler400"
handler403 = "django_sequences.views.handler403"
handler404 = "django_sequences.views.handler404"
handler500 = "django_sequences.views.handler500"
