"""Reads of training runs for the pages."""

from __future__ import annotations

from django.db.models import QuerySet

from leaderboard.models import Dataset

from .models import TrainingRun


def trainable_datasets() -> QuerySet[Dataset]:
    """The datasets a learned method can train on: hosted here, with a loaded train split."""
    return Dataset.objects.filter(hosted=True, states__split="train").distinct().order_by("slug", "-version")


def runs() -> QuerySet[TrainingRun]:
    """Every run, newest first, with its dataset."""
    return TrainingRun.objects.select_related("dataset").order_by("-created_at")


def run(pk: int) -> TrainingRun:
    """One run with its submissions' results."""
    return TrainingRun.objects.select_related("dataset").prefetch_related("submissions__results").get(pk=pk)
