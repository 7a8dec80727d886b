"""The one JSON shape of a submission, used by the API and the polling pages."""

from __future__ import annotations

from typing import Any

from qval import metric_registry

from .ladder import outcome
from .models import Submission


def submission_payload(sub: Submission) -> dict[str, Any]:
    """State, timeline, error, problems, coverage and results of a submission (no labels), with its visibility
    (``public``) and method ``card``.

    ``ladder``: its step on its account's ladder of a hidden split (:func:`submissions.ladder.outcome`,
    ``None`` off a ladder); a submission that did not climb has no ``results``: its score is withheld.  Each result
    says whether the pages show it (``shown``, :func:`qval.metric_registry.shown`: sign agreement only where the
    dataset's labels have both signs), and ``one_sign_note`` why one is not shown, so that the CLI shows what the
    pages show.
    """
    results = list(sub.results.all()) if sub.state == Submission.FINISHED and not sub.score_withheld else []
    asks = any(not metric_registry.shown(r.metric, both_signs=False) for r in results)  # sign agreement is there
    both_signs = not asks or sub.dataset.labels_have_both_signs(sub.target)
    shown = {r.metric: metric_registry.shown(r.metric, both_signs) for r in results}
    return {
        "id": sub.pk,
        "kind": sub.kind,
        "source": sub.source,
        "dataset": sub.dataset.key,
        "split": sub.split,
        "target": sub.target,
        "method": sub.method_name,
        "family": sub.method.family if sub.method else None,
        "backbone": sub.backbone_name or None,
        "modality": sub.modality,
        "public": sub.public,
        "card": {"description": sub.description, "paper_url": sub.paper_url or None, "code_url": sub.code_url or None,
                 "open_weights": sub.open_weights},
        "filename": sub.filename,
        "format": sub.file_format,
        "sha256": sub.sha256,
        "size_bytes": sub.size_bytes,
        "state": sub.state,
        "final": sub.is_final,
        "error": sub.error or None,
        "fault": sub.fault or None,
        "problems": sub.problems,
        "coverage": sub.coverage,
        "worker": sub.worker or None,
        "attempt": sub.attempt,
        "timeline": {state: ts.isoformat() for state, ts in sub.timeline()},  # each state's latest time
        "history": [{**t, "at": t["at"].isoformat()} for t in sub.transitions()],  # type: ignore[attr-defined]
        "container": container_payload(sub),
        "baseline": baseline_payload(sub),
        "ladder": outcome(sub),
        "results": [
            {
                "metric": r.metric,
                "value": r.value,
                "p_value": r.p_value,
                "num_points": r.num_points,
                "num_dropped": r.num_dropped,
                "coverage": r.coverage,
                "insufficient": r.insufficient,
                "details": r.details,
                "shown": shown[r.metric],
            }
            for r in results
        ],
        "one_sign_note": "" if all(shown.values()) else metric_registry.ONE_SIGN_NOTE,
    }


def container_payload(sub: Submission) -> dict[str, Any] | None:
    """How a container submission ran (``None`` for a predictions file): image ID, limits,
    deadline, outcome (``finished`` or the runner's reason; empty until it ran), exit code,
    seconds run, backbone tokens used (``None`` without a backbone) and the first and last 64 KiB of stdout and stderr."""
    if sub.kind != Submission.KIND_CONTAINER:
        return None
    return {
        "image_id": sub.image_id or None,
        "limits": sub.limits,
        "deadline": sub.deadline.isoformat() if sub.deadline else None,
        "outcome": sub.container_outcome or None,
        "exit_code": sub.exit_code,
        "wall_s": sub.wall_s,
        "backbone_tokens": sub.token_usage or None,
        "stdout": sub.stdout,
        "stderr": sub.stderr,
    }


def baseline_payload(sub: Submission) -> dict[str, Any] | None:
    """A baseline run's config (method and version, prompt hash, backbone and checkpoint hash,
    sampling parameters, seed, counts), progress (points done / total, tokens, ETA in seconds) and
    NaN count; ``None`` for other submissions."""
    if sub.kind != Submission.KIND_BASELINE:
        return None
    p, shown = sub.progress or {}, sub.job_progress
    assert shown is not None
    return {
        "config": sub.config,
        "progress": {"done": p.get("done", 0), "total": p.get("total"), "tokens": p.get("tokens", 0),
                     "eta_s": shown.seconds_left, "updated_at": p.get("updated_at"),
                     "deliveries": p.get("deliveries", 0), "shown": shown.as_dict()},
        "num_nan": sub.num_nan,
    }
