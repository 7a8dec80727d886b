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


def finished_runs() -> QuerySet[TrainingRun]:
    """The finished runs (their models can pick in a Best-of-N run), newest first, with their datasets."""
    return runs().filter(status=TrainingRun.FINISHED).order_by("-finished_at", "-pk")


def newest_finished(method: str, dataset_slug: str) -> TrainingRun | None:
    """The most recently finished run of ``method`` on a dataset of slug ``dataset_slug`` (any version)."""
    return finished_runs().filter(method=method, dataset__slug=dataset_slug).first()


def run(pk: int) -> TrainingRun:
    """One run with its submissions' results."""
    return TrainingRun.objects.select_related("dataset").prefetch_related("submissions__results").get(pk=pk)
