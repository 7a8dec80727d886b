"""One job model (issue 34): every kind of job -- a submission, a training run, a Best-of-N run, a dataset build -- is
a :class:`jobs.models.Job` moved by one machinery (:class:`jobs.services.JobKind`), registered in one place
(:mod:`jobs.registry`), reaped by one beat task, and its progress drawn by one partial. Read from the models and the
source files; each check names what breaks it."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from django.apps import apps

from tests.test_structure import REPO, import_graph, module_files

JOB_FIELDS = {"heartbeat_at", "deadline", "sent_at"}
"""The fields of a job's liveness (:class:`jobs.models.Job`): a model with one of them runs as a job (a remote job's
token keeps the ``attempt`` it is bound to: that is no job of its own)."""


def calls(names: set[str]) -> dict[str, list[str]]:
    """Where each call of a function or method named one of ``names`` is written, as ``path:function``."""
    found: dict[str, list[str]] = defaultdict(list)

    def visit(node: ast.AST, path: str, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            if isinstance(child, ast.Call):
                func = child.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if called in names:
                    found[called].append(f"{path}:{where}")
            visit(child, path, inner)

    for path in module_files(REPO).values():
        if "migrations" not in path.parts:
            visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), path.relative_to(REPO).as_posix(), "<module>")
    return found


def test_every_job_model_is_a_registered_kind_of_the_shared_machinery() -> None:
    from jobs.models import Job
    from jobs.registry import KINDS, kinds
    from jobs.services import JobKind

    registered = kinds()
    assert all(isinstance(kind, JobKind) for kind in registered) and len(registered) == len(KINDS)
    by_model = defaultdict(list)
    for kind in registered:
        by_model[kind.model].append(kind.name)
    concrete = [m for m in apps.get_models() if issubclass(m, Job)]
    assert sorted(m.__name__ for m in concrete) == ["BestOfNRun", "DatasetBuild", "Submission", "TrainingRun"]
    assert {m: len(names) for m, names in by_model.items()} == {m: 1 for m in concrete}, by_model
    # No model keeps a lifecycle of its own beside them.
    own = [f"{m._meta.label}.{f.name}" for m in apps.get_models() if not issubclass(m, Job)
           for f in m._meta.get_fields() if f.name in JOB_FIELDS]
    assert not own, f"models with job fields that are no jobs.models.Job: {own}"


def test_the_kinds_are_defined_beside_their_services_and_registered_in_one_place() -> None:
    """A :class:`~jobs.services.JobKind` is made only at module level of the module the registry names (one per
    kind), and only :mod:`jobs.registry` lists the kinds."""
    from jobs.registry import KINDS

    made = calls({"JobKind", "run_kind"})
    where = sorted(site for sites in made.values() for site in sites if not site.startswith("jobs/services.py"))
    assert where == sorted(f"{path.rsplit('.', 1)[0].replace('.', '/')}.py:<module>" for path in KINDS), where
    named = defaultdict(list)  # each kind's import path, where it is written (docstrings aside)
    for path in module_files(REPO).values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                      and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in KINDS and id(node) not in docstrings:
                named[node.value].append(path.relative_to(REPO).as_posix())
    assert named == {path: ["jobs/registry.py"] for path in KINDS}, named


def test_claims_heartbeats_requeues_and_reapers_are_written_once() -> None:
    """The claim (a fresh heartbeat leaves a delivery alone), the heartbeat thread, the requeue and the reapers are
    the machinery's: no app writes its own."""
    found = calls({"is_fresh", "reap_lost", "reap_overdue", "resend_unsent", "requeue_or_fail"})
    assert found["is_fresh"] == ["jobs/services.py:claim"]
    heartbeats = sorted(m for m, targets in import_graph().edges.items() if "jobs.heartbeat" in targets)
    assert heartbeats == ["jobs.services"], f"only the machinery runs the heartbeat thread: {heartbeats}"
    for name in ("reap_lost", "reap_overdue", "resend_unsent"):
        assert found[name] == ["jobs/services.py:reap"], (name, found[name])
    assert sorted(found["requeue_or_fail"]) == [
        "jobs/services.py:reap_lost", "submissions/lifecycle.py:requeue_lost"], found["requeue_or_fail"]


def test_one_reaper_task_walks_the_registry(settings) -> None:  # type: ignore[no-untyped-def]
    tasks = [f"{path.relative_to(REPO).as_posix()}:{node.name}" for path in module_files(REPO).values()
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.FunctionDef) and "reap" in node.name
             and any("shared_task" in ast.unparse(d) for d in node.decorator_list)]
    assert tasks == ["jobs/tasks.py:reap_jobs"], tasks
    beat = [e["task"] for e in settings.CELERY_BEAT_SCHEDULE.values() if "reap" in e["task"]]
    assert beat == ["jobs.tasks.reap_jobs"]


def test_every_job_page_draws_progress_with_one_partial() -> None:
    """A ``<progress>`` bar is written in ``templates/jobs/_progress.html`` only, and every page of a job includes
    it (and the admin of builds renders it)."""
    partial = "jobs/_progress.html"
    templates = REPO / "templates"
    bars = sorted(p.relative_to(templates).as_posix() for p in templates.rglob("*.html") if "<progress" in p.read_text())
    assert bars == [partial], bars
    for page in ("submissions/detail.html", "learning/run.html", "learning/runs.html",
                 "best_of_n/run.html", "workers/status.html"):
        assert f'include "{partial}"' in (templates / page).read_text(), page
    assert partial in Path(REPO / "leaderboard" / "admin.py").read_text()
