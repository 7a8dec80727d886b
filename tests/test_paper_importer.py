"""A second paper is one module: a toy paper written against :class:`qval.paper.base.PublishedResults` is imported
by the site's command, its rows land on a dataset of their own, its labels are what the site scores against, and
importing again rewrites only what changed."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from django.core.management import call_command

from leaderboard.loading import truth_for
from leaderboard.models import Dataset, Environment
from qval import metrics, paper, scoring
from qval.paper.base import Batch, ImportedRow, PublishedEnvironment, PublishedResults
from submissions.models import Submission

LABELS = np.array([0.1, 0.5, 0.9, 0.3])


class ToyPaper(PublishedResults):
    """A paper with one environment (ours: ``corridor``) and one reported number per method."""

    key = "toy-2027"
    title = "Toy-2027"
    dataset_version = "2.0"
    rules = metrics.REFERENCE_RULES
    dataset_description = "The toy paper's dataset."

    def __init__(self) -> None:
        self.values = {"gvl": 0.61, "eureka": 0.42}

    def environments(self) -> dict[str, PublishedEnvironment]:
        return {"Corridor": PublishedEnvironment("Corridor", "corridor", "A corridor to walk.", ("text",))}

    def dataset_provenance(self) -> dict[str, str]:
        return {"repository": "example/toy", "commit": "0" * 40}

    def truth(self, environment: str, target: str) -> scoring.Truth:
        assert environment == "corridor"
        return scoring.Truth(point_ids=[f"p{i}" for i in range(len(LABELS))], point_labels=LABELS)

    def batches(self, resamples: int) -> Iterator[Batch]:
        values = dict(self.values)

        def rows() -> Iterator[ImportedRow]:
            for method, value in values.items():
                yield ImportedRow(
                    key=f"toy:{method}", environment="Corridor", method=method, backbone="Toy 1B", target="q",
                    modality="text", source="reported", provenance={"file": "toy.json", "data_sha256": repr(values)},
                    results=({"metric": "spearman", "value": value, "p_value": None, "num_points": 4,
                              "num_dropped": 0, "coverage": 1.0, "insufficient": False, "details": {}},))

        yield Batch(source="reported", keys=tuple(f"toy:{m}" for m in values), digest=repr(values), rows=rows)


@pytest.mark.django_db
def test_a_second_paper_is_imported_through_the_interface(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    toy = ToyPaper()
    monkeypatch.setattr(paper, "papers", lambda: {toy.key: toy})  # the toy paper alone: QVal v1.0 is tested apart

    call_command("import_results", "--resamples", "0")
    assert "imported 2 reported and 0 re-scored evaluations (2 results)" in capsys.readouterr().out
    dataset = Dataset.objects.get(slug="toy-2027-corridor", version="2.0")
    assert not dataset.hosted and dataset.name == "Toy-2027 Corridor (reported)"
    assert dataset.manifest["provenance"]["repository"] == "example/toy"
    assert Environment.objects.get(slug="corridor").description == "A corridor to walk."
    rows = Submission.objects.filter(dataset=dataset, source="reported").order_by("method_name")
    assert [(s.method_name, s.results.get().value) for s in rows] == [("eureka", 0.42), ("gvl", 0.61)]
    assert all(s.state == Submission.FINISHED and s.import_key.startswith("toy:") for s in rows)
    assert np.array_equal(truth_for(dataset, "test", "q").point_labels, LABELS)  # the site's labels: the paper's

    call_command("import_results", "--resamples", "0")  # unchanged: nothing rewritten
    assert "(0 results)" in capsys.readouterr().out
    toy.values["gvl"] = 0.7  # a corrected number: the batch is imported again, in place
    call_command("import_results", "--resamples", "0")
    assert "(2 results)" in capsys.readouterr().out
    assert Submission.objects.get(import_key="toy:gvl").results.get().value == 0.7
    assert Submission.objects.filter(dataset=dataset).count() == 2


def test_the_papers_are_found_in_their_package() -> None:
    found = paper.papers()
    assert list(found) == ["qval-v1.0"]
    qval_v1 = found["qval-v1.0"]
    assert paper.for_dataset("qval-v1.0-terminalbench") == (qval_v1, "terminalbench")
    assert paper.for_dataset("frozenlake-8x8") is None and paper.publishing("OpenApps") is qval_v1
    with pytest.raises(paper.PublishedDataError, match="no paper publishes a dataset 'miniwob'"):
        paper.truth("miniwob", "q")
