"""``manage.py export_labels --dataset KEY --split test``: maintainer-only id,label CSV."""

from __future__ import annotations

import csv

from django.core.management.base import BaseCommand, CommandError, CommandParser

from leaderboard.models import Dataset, Label


class Command(BaseCommand):
    help = "Print the labels of a dataset split as id,target,label CSV (maintainers only: includes hidden labels)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dataset", required=True, help="slug or slug@version")
        parser.add_argument("--split", required=True, choices=["train", "dev", "test"])
        parser.add_argument("--target", choices=["q", "v"], help="only this target")

    def handle(self, *args: object, **opts: object) -> None:
        ds = Dataset.lookup(str(opts["dataset"]))
        if ds is None:
            raise CommandError(f"unknown dataset {opts['dataset']!r}")
        labels = Label.objects.filter(labelset__dataset=ds, split=opts["split"]).order_by("target", "item_id")
        if opts["target"]:
            labels = labels.filter(target=opts["target"])
        writer = csv.writer(self.stdout)
        writer.writerow(["id", "target", "label"])
        for item_id, target, value in labels.values_list("item_id", "target", "value"):
            writer.writerow([item_id, target, repr(value)])
