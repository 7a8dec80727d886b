"""TerminalBench-lite's dataset versions, oldest first (every one rebuilds with its published fingerprint)."""

from __future__ import annotations

from qval.build import DatasetSpec
from qval.envs.entry import DatasetVersion

ADAPTER = f"{__package__}.adapter:Terminal"

FILES = 30
"""Task files (``tasks/*.toml``) the published versions play."""
HORIZON = 9
"""The adapter's horizon on those files: the longest solution, its submit and 4 steps more."""
KINDS: tuple[str, ...] = ("files", "git", "python", "archives", "permissions", "services")
"""The task kinds the descriptions name (:data:`.adapter.KINDS`)."""

PER_TASK_0 = 7
"""``terminalbench-lite@1.0``: trajectories of each task."""

V1_0 = DatasetVersion(
    DatasetSpec(
        slug="terminalbench-lite",
        name="TerminalBench-lite (shell tasks, text)",
        version="1.0",
        description=(
            f"{FILES} shell tasks written for QVal in Terminal-Bench's layout (an instruction, a scripted "
            "solution, tests that decide success), of the easy tier's kinds (" + ", ".join(KINDS) + "), each "
            "command run in a fresh podman container (scripts/build-terminal-image.sh: Debian bookworm's bash, "
            "coreutils, git, tar, gzip, python3; no network, memory, CPU and pids limits, an unprivileged user) on "
            f"the task's /app. {PER_TASK_0 * FILES} trajectories ({PER_TASK_0} per task) of at most "
            f"{HORIZON} steps by the scripted solution with ε=0.3 random candidate commands; up to 3 states per "
            "trajectory (not the first or last turn); candidates: the actor's command, the reference command and "
            "2 others among the solution step after it, near misses, harmful and neutral commands and a "
            "premature submit. Reward 1 when the task's tests pass at submit (which ends the episode). Labels: "
            "restore the state (a tar of /app), force the candidate, follow the scripted solution (the next "
            "solution step not yet run, then submit; no repair step) until the horizon (counted from the episode "
            "start), γ=0.95. Observation: the instruction and every command so far with its output. Train, dev "
            "and test hold disjoint tasks (task j goes to split j mod 3); the test tasks (ids hidden-j: the task "
            "file of that position with parameter values, such as file names and ports, drawn from the "
            "maintainer's secret) and the test trajectories' random draws come from the secret."
        ),
        modalities=("text",),
        num_trajectories=PER_TASK_0 * FILES,
        max_states_per_trajectory=3,
        epsilon=0.3,
        seed=42,
        discount=0.95,
        num_rollouts=1,
        splits=("train", "dev", "test"),
        split_by="task",
        secret_test=True,
    ),
    ADAPTER,
)
"""``terminalbench-lite@1.0`` (superseded by 1.1, whose test split plays every task file): 30 shell tasks split by
file, the test files' parameters drawn from the secret."""

PER_TASK_1 = 2
"""``terminalbench-lite@1.1``: trajectories of each of its 60 tasks (every task file twice; about 2.07 states per
trajectory in 1.0's collection: about 124 test points over the 30 files, 62 train and 62 dev)."""

SPLIT_CYCLE_1: tuple[str, ...] = ("train", "dev") * 15 + ("test",) * 30
"""``terminalbench-lite@1.1``: task ``j`` goes to ``SPLIT_CYCLE_1[j % 60]``: the first copy of the 30 files
alternates train and dev (file-name order), the second copy, every file with secret parameters, is the test split."""

V1_1 = DatasetVersion(
    DatasetSpec(
        slug="terminalbench-lite",
        name="TerminalBench-lite (shell tasks, text)",
        version="1.1",
        description=(
            f"{FILES} shell tasks written for QVal in Terminal-Bench's layout (an instruction, a scripted "
            "solution, tests that decide success), of the easy tier's kinds (" + ", ".join(KINDS) + "), each "
            "command run in a fresh podman container (scripts/build-terminal-image.sh: Debian bookworm's bash, "
            "coreutils, git, tar, gzip, python3; no network, memory, CPU and pids limits, an unprivileged user) on "
            f"the task's /app. Every task file is played twice: its default parameters (train and dev: "
            f"{FILES // 2} files each, alternating in file-name order) and parameters drawn from the maintainer's "
            f"secret (the test split: all {FILES} files, ids hidden-j, such as other file names, ports and "
            f"versions). {PER_TASK_1 * 2 * FILES} trajectories ({PER_TASK_1} per task) of at most {HORIZON} "
            "steps by the scripted solution with ε=0.3 random candidate commands; up to 3 states per trajectory "
            "(not the first or last turn); candidates: the actor's command, the reference command and 2 others "
            "among the solution step after it, near misses, harmful and neutral commands and a premature submit. "
            "Reward 1 when the task's tests pass at submit (which ends the episode). Labels: restore the state (a "
            "tar of /app), force the candidate, follow the scripted solution (the next solution step not yet run, "
            "then submit; no repair step) until the horizon (counted from the episode start), γ=0.95. "
            "Observation: the instruction and every command so far with its output. The test trajectories' random "
            "draws come from the secret too. Supersedes 1.0 (split by file: 10 files per split)."
        ),
        modalities=("text",),
        num_trajectories=PER_TASK_1 * 2 * FILES,
        max_states_per_trajectory=3,
        epsilon=0.3,
        seed=42,
        discount=0.95,
        num_rollouts=1,
        splits=("train", "dev", "test"),
        split_by="task",
        split_cycle=SPLIT_CYCLE_1,
        secret_test=True,
    ),
    ADAPTER,
    {"copies": 2},
)
"""``terminalbench-lite@1.1``: 30 shell tasks of Terminal-Bench's easy-tier kinds, every command run in a podman
sandbox; train and dev hold 15 task files each with their default parameters, the test split every one of the 30
files with parameters drawn from the maintainer's secret."""

VERSIONS: tuple[DatasetVersion, ...] = (V1_0, V1_1)
