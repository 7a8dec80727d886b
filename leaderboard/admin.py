"""Django admin: dataset builds (progress, status, reason) and the loaded datasets, read-only."""

from __future__ import annotations

from django.contrib import admin
from django.template.loader import render_to_string

from .models import Dataset, DatasetBuild


@admin.register(DatasetBuild)
class DatasetBuildAdmin(admin.ModelAdmin):
    """Builds with their stage and a progress bar; records are written by the builds, not here."""

    list_display = ("id", "name", "status", "stage", "progress", "started_at", "finished_at", "dataset_key", "error")
    list_filter = ("status", "name")
    search_fields = ("name", "dataset_key", "error")
    readonly_fields = [f.name for f in DatasetBuild._meta.fields]

    @admin.display(description="progress")
    def progress(self, obj: DatasetBuild) -> str:
        return render_to_string("jobs/_progress.html", {"p": obj.job_progress})

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def,override]
        return False  # queue builds with `manage.py build_dataset NAME --queue`


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    """Loaded dataset versions (immutable)."""

    list_display = ("key", "name", "environment", "modalities", "fingerprint", "created_at")
    readonly_fields = [f.name for f in Dataset._meta.fields]

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def,override]
        return False
