"""The per-task table of a hosted dataset's page: per split, states and candidates per task and per group
(the task's kind where an environment has several: ALFWorld all-types' task type, TerminalBench-lite's
task kind, both recorded on every state as ``State.task_type``), and one example state per task on the
public splits.

What it shows of the test split are counts of its inputs (the same tasks, states and candidates as the
split's download, which has no labels); no example, no observation and no label of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Min

from qval.schema import PUBLIC_SPLITS

from .models import SPLIT_CHOICES, Dataset, Label, State

EXAMPLE_OBSERVATION_CHARS = 1500
"""An example's observation is cut after this many characters (an ALFWorld observation lists every
admissible command); the downloads have it whole."""


@dataclass(frozen=True)
class ExampleCandidate:
    """A candidate action of an example state, with its Q label (examples are on public splits only)."""

    external_id: str
    action: str
    is_actor: bool
    q_label: float | None
    next_image: str | None


@dataclass(frozen=True)
class Example:
    """The example state of a task: its middle state in dataset order, observation cut at
    :data:`EXAMPLE_OBSERVATION_CHARS`."""

    external_id: str
    trajectory: int
    step: int
    observation: str
    truncated: bool
    image: str | None
    candidates: tuple[ExampleCandidate, ...]


@dataclass(frozen=True)
class TaskRow:
    """One task of a split: its states and candidates, and its example (public splits only)."""

    task: str
    states: int
    candidates: int
    example: Example | None


@dataclass(frozen=True)
class GroupRows:
    """The tasks of one group within a split (``group`` is ``""`` where the dataset has no groups)."""

    group: str
    tasks: tuple[TaskRow, ...]

    @property
    def states(self) -> int:
        """States of the group's tasks."""
        return sum(t.states for t in self.tasks)

    @property
    def candidates(self) -> int:
        """Candidates of the group's tasks."""
        return sum(t.candidates for t in self.tasks)


@dataclass(frozen=True)
class SplitTasks:
    """A split's tasks by group (groups by name, tasks in dataset order)."""

    split: str
    public: bool
    groups: tuple[GroupRows, ...]

    @property
    def tasks(self) -> tuple[TaskRow, ...]:
        """Every task of the split."""
        return tuple(t for g in self.groups for t in g.tasks)

    @property
    def examples(self) -> tuple[tuple[str, TaskRow], ...]:
        """``(group, task)`` of each task with an example."""
        return tuple((g.group, t) for g in self.groups for t in g.tasks if t.example is not None)


@dataclass(frozen=True)
class TaskTable:
    """A dataset's tasks, split by split (splits with no state left out)."""

    splits: tuple[SplitTasks, ...]

    @property
    def has_groups(self) -> bool:
        """Whether the states name a group (a task type or kind)."""
        return any(g.group for s in self.splits for g in s.groups)

    def group_states(self) -> list[dict[str, object]]:
        """States per group and split, the groups by name: ``[{"group": g, "counts": [n per split of
        :attr:`splits`], "total": n}, …]``, empty where the dataset has no groups."""
        if not self.has_groups:
            return []
        per_split = [{g.group: g.states for g in s.groups} for s in self.splits]
        names = sorted({name for counts in per_split for name in counts})
        return [{"group": name, "counts": [c.get(name, 0) for c in per_split],
                 "total": sum(c.get(name, 0) for c in per_split)} for name in names]


def task_table(ds: Dataset) -> TaskTable:
    """Per split of ``ds``: states and candidates per task, grouped by ``State.task_type``; on the
    public splits one example per task with its candidates and their Q labels."""
    return TaskTable(splits=_split_tasks(ds, _examples(ds)))


def _split_tasks(ds: Dataset, examples: dict[tuple[str, str], Example]) -> tuple[SplitTasks, ...]:
    """The splits of ``ds`` that have states, their tasks grouped by ``State.task_type`` (one query),
    each task with its example from ``examples`` where there is one."""
    rows = (ds.states.order_by().values("split", "task", "task_type")
            .annotate(n_states=Count("pk", distinct=True), n_candidates=Count("candidates"), first=Min("position")))
    splits = []
    for split, _ in SPLIT_CHOICES:
        mine = sorted((r for r in rows if r["split"] == split), key=lambda r: r["first"])
        if not mine:
            continue
        groups: dict[str, list[TaskRow]] = {}
        for r in mine:
            groups.setdefault(r["task_type"] or "", []).append(
                TaskRow(task=r["task"], states=r["n_states"], candidates=r["n_candidates"],
                        example=examples.get((split, r["task"]))))
        splits.append(SplitTasks(split=split, public=split in PUBLIC_SPLITS,
                                 groups=tuple(GroupRows(g, tuple(groups[g])) for g in sorted(groups))))
    return tuple(splits)


def _examples(ds: Dataset) -> dict[tuple[str, str], Example]:
    """The example of each task of the public splits, by ``(split, task)``: its middle state by position.
    Nothing of a hidden split is read."""
    public = sorted(PUBLIC_SPLITS)
    by_task: dict[tuple[str, str], list[int]] = {}
    for split, task, pk in ds.states.filter(split__in=public).order_by("position").values_list("split", "task", "pk"):
        by_task.setdefault((split, task), []).append(pk)
    picked = [pks[len(pks) // 2] for pks in by_task.values()]
    states = list(State.objects.filter(pk__in=picked).prefetch_related("candidates"))
    cids = [c.external_id for st in states for c in st.candidates.all()]
    q = dict(Label.objects.filter(labelset__dataset=ds, split__in=public, target="q", item_id__in=cids)
             .values_list("item_id", "value"))
    out: dict[tuple[str, str], Example] = {}
    for st in states:
        assert st.split in PUBLIC_SPLITS
        out[st.split, st.task] = Example(
            external_id=st.external_id, trajectory=st.trajectory, step=st.step,
            observation=st.observation[:EXAMPLE_OBSERVATION_CHARS],
            truncated=len(st.observation) > EXAMPLE_OBSERVATION_CHARS, image=st.image,
            candidates=tuple(ExampleCandidate(external_id=c.external_id, action=c.action, is_actor=c.is_actor,
                                              q_label=q.get(c.external_id), next_image=c.next_image)
                             for c in st.candidates.all()))
    return out


def split_counts(ds: Dataset) -> dict[str, dict[str, object]]:
    """Per split of ``ds`` that has states: ``{"states": n, "tasks": distinct tasks, "task_types": {type:
    states}}`` (``task_types`` only where the states name one, as ALFWorld all-types and TerminalBench-lite do).
    Counts of inputs only, so the test split's are as public as its download."""
    out: dict[str, dict[str, object]] = {}
    for split in _split_tasks(ds, {}):
        counts: dict[str, object] = {"states": sum(t.states for t in split.tasks),
                                     "tasks": len({t.task for t in split.tasks})}
        types = {g.group: g.states for g in split.groups if g.group}
        if types:
            counts["task_types"] = types
        out[split.split] = counts
    return out
