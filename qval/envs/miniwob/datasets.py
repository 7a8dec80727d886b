"""MiniWoB++'s dataset versions, oldest first (every one rebuilds with its published fingerprint)."""

from __future__ import annotations

from qval.build import DatasetSpec
from qval.envs.entry import DatasetVersion

ADAPTER = f"{__package__}.adapter:MiniWoB"

TASKS_1: tuple[str, ...] = (
    "login-user",
    "enter-password",
    "click-checkboxes",
    "use-spinner",
    "click-option",
    "enter-text-2",
)
"""``miniwob@1.1``'s MiniWoB task names: those of :data:`.adapter.TASK_NAMES` whose collected
trajectories have middle turns (the others are solved in two actions and give no state)."""

SEEDS_1 = 16
"""``miniwob@1.1`` and ``1.2``: BrowserGym seeds of each task name (0–15)."""

SPLIT_CYCLE_1: tuple[str, ...] = ("dev", "test", "train", "train", "dev", "test")
"""Task ``j`` goes to ``SPLIT_CYCLE_1[j % 6]``: with the tasks listed seed-major, one MiniWoB task
name per position, so dev = login-user + click-option, test = enter-password + enter-text-2, train =
click-checkboxes + use-spinner (about the same number of states each)."""

if len(TASKS_1) % len(SPLIT_CYCLE_1):
    raise ValueError("MiniWoB task names must be a multiple of the split cycle so that split_by='task' keeps names apart")

V1_1 = DatasetVersion(
    DatasetSpec(
        slug="miniwob",
        name="MiniWoB++ (BrowserGym)",
        version="1.1",
        description=(
            "MiniWoB++ through BrowserGym 0.14.3 (miniwob 1.1.0 pages, Debian's headless Chromium): 6 tasks that "
            "need two or more actions (" + ", ".join(TASKS_1) + f"), instances from BrowserGym reset seeds "
            f"0–{SEEDS_1 - 1}. {SEEDS_1 * len(TASKS_1)} trajectories (one per task and seed) of at most 12 steps by "
            "a scripted optimal policy with ε=0.25 random candidate actions; up to 4 states per trajectory (not the "
            "first or last turn); candidates: the actor's action and 3 others among click on the interactive "
            "(set-of-marks) elements and fill of the text fields with the goal's strings. Labels: restore the state "
            "(reset(seed) and replay), force the candidate, follow the scripted policy until the 12-step horizon "
            "(counted from the episode start); reward 1 on MiniWoB success, γ=0.95. Observation: the goal and "
            "BrowserGym's flattened accessibility tree with element ids; image: the screenshot with set-of-marks "
            "ids, for every state and candidate next state. Train, dev and test hold disjoint MiniWoB tasks (dev: "
            "login-user, click-option; test: enter-password, enter-text-2; train: click-checkboxes, use-spinner). "
            "Size: chosen so that the build takes about 30 minutes (labelling a state replays it in the browser "
            "five times, about 14 s a state on an idle 2-core machine), which gives roughly 30–40 states per split "
            "— fewer than the 50 pairs the global correlations need, so on this version they may be reported as "
            "insufficient and the per-state ranking is the main measure. Supersedes 1.0 (no train split, about 20 "
            "states)."
        ),
        modalities=("text", "image"),
        num_trajectories=SEEDS_1 * len(TASKS_1),
        max_states_per_trajectory=4,
        epsilon=0.25,
        seed=42,
        discount=0.95,
        num_rollouts=1,
        splits=("train", "dev", "test"),
        split_by="task",
        split_cycle=SPLIT_CYCLE_1,
    ),
    ADAPTER,
    {"task_names": TASKS_1, "seeds": tuple(range(SEEDS_1)), "horizon": 12},
)
"""``miniwob@1.1`` (superseded by 1.2, whose test split is secret): six multi-step MiniWoB++ tasks through
BrowserGym in Debian's Chromium, split by task."""

V1_2 = V1_1.derive(
    version="1.2",
    description=V1_1.spec.description.replace(
        "Supersedes 1.0 (no train split, about 20 states).",
        "Goal images: the screenshot of the final state of the reference rollout from every state and "
        "candidate. Train and dev are those of 1.1 (goal images aside); the test tasks' instances (ids "
        "'{task}:hidden-{position}') use BrowserGym seeds derived from the maintainer's secret, and so do the "
        "test trajectories' random draws. Supersedes 1.1 (public test seeds) and 1.0.",
    ),
    secret_test=True,
    end_images=True,
)
"""``miniwob@1.2`` (superseded by 2.0): 1.1's train and dev exactly, a test split whose instances (BrowserGym
seeds) come from the maintainer's secret, and goal images for every point."""

TASKS_2: tuple[str, ...] = (
    "enter-text",
    "enter-text-2",
    "enter-text-dynamic",
    "login-user",
    "login-user-popup",
    "enter-password",
    "click-checkboxes",
    "click-option",
    "use-spinner",
    "enter-date",
    "enter-time",
    "form-sequence-2",
    "multi-orderings",
    "multi-layouts",
    "click-tab-2",
    "click-tab-2-hard",
)
"""``miniwob@2.0``'s MiniWoB task names: those of :data:`.adapter.TASK_NAMES` whose goal changes with
the seed (Best-of-N draws instances whose goal is none of the dataset's, so click-button-sequence and read-table-2,
whose goal never changes, and find-word, with 14 goals, are left out).  Sixteen, not a multiple of 3: with the
tasks listed seed-major, name ``i`` with seed ``s`` is task ``16 s + i``, in split ``(s + i) mod 3``, so every name
is in every split."""

SEEDS_2 = 14
"""``miniwob@2.0``: BrowserGym seeds of each task name (0–13; the test positions' seeds come from the secret)."""


if len(TASKS_2) % 3 == 0:
    raise ValueError("miniwob@2.0's task names must not be a multiple of the split cycle, so that every name "
                     "reaches every split")

V2_0 = DatasetVersion(
    DatasetSpec(
        slug="miniwob",
        name="MiniWoB++ (BrowserGym)",
        version="2.0",
        description=(
            f"MiniWoB++ through BrowserGym 0.14.3 (miniwob 1.1.0 pages, Debian's headless Chromium): {len(TASKS_2)} "
            "tasks (" + ", ".join(TASKS_2) + ") whose goal changes with the instance, most solved in two to five "
            f"actions; instances from BrowserGym reset seeds 0–{SEEDS_2 - 1}. {SEEDS_2 * len(TASKS_2)} trajectories (one "
            "per task and seed) of at most 12 steps by a scripted policy per task (reads the goal, the accessibility "
            "tree and, where the tree hides it, the page: field values, hidden tab panels, field labels) with "
            "ε=0.25 random candidate actions; up to 3 states per trajectory, drawn among every turn but the last "
            "(the first turn is sampled too, so two-action tasks give a state). Candidates: the actor's action and 3 "
            "others among click on the interactive (set-of-marks) elements and fill of the text, date and time "
            "fields with the goal's quoted strings and the policy's own text. Labels: restore the state "
            "(reset(seed) and replay), force the candidate, follow the scripted policy until the 12-step horizon "
            "(counted from the episode start); reward 1 when MiniWoB's raw reward is positive, γ=0.95. The scripted "
            "policy is optimal except on click-checkboxes, where MiniWoB also counts a submit with more right boxes "
            "than wrong as a success, so an early submit can score above it; the labels are those of the scripted "
            "policy. Observation: the goal and BrowserGym's flattened accessibility tree with element ids; image: "
            "the goal written in a banner above the screenshot (BrowserGym empties MiniWoB's own goal box) with "
            "set-of-marks ids, for every state and candidate next state, and goal images (the final screenshot of "
            "the reference rollout from every state and candidate). Split by task: task j (listed seed-major, so "
            f"name i with seed s is task {len(TASKS_2)}s + i) goes to (train, dev, test)[j mod 3]; with {len(TASKS_2)} "
            "names every name is in every split, on different instances; every state names its MiniWoB task as its "
            "task type. The test instances (ids "
            "'{task}:hidden-{position}') use BrowserGym seeds derived from the maintainer's secret, and so do the "
            "test trajectories' random draws. Size: a full collection sampled 396 states (1.77 per trajectory; "
            "74 of the 224 trajectories are test ones, so about 130 test points). Supersedes 1.2 (6 tasks, about 20 test points)."
        ),
        modalities=("text", "image"),
        num_trajectories=SEEDS_2 * len(TASKS_2),
        max_states_per_trajectory=3,
        epsilon=0.25,
        seed=42,
        discount=0.95,
        num_rollouts=1,
        splits=("train", "dev", "test"),
        split_by="task",
        secret_test=True,
        end_images=True,
        sample_first_turn=True,
    ),
    ADAPTER,
    {"task_names": TASKS_2, "seeds": tuple(range(SEEDS_2)), "horizon": 12, "goal_banner": True,
     "name_as_task_type": True},
)
"""``miniwob@2.0``: 16 MiniWoB++ task names × 14 seeds, every name in every split (split by task: task ``j`` goes to
``(train, dev, test)[j mod 3]``), the test instances drawn from the maintainer's secret, the first turn sampled too
(most tasks take two actions), the goal drawn above every image.

Size: 224 trajectories, 74 of them test (4–5 instances of each name).  Measured (64 trajectories, every name on
seeds 0–3, collected with these settings on 2026-11-27): 1.77 sampled states per trajectory (two-action tasks 1,
multi-orderings and multi-layouts nearly 3), so about 400 states, about 130 of them test.  Labelling a state costs
about 14 s with images on an idle 2-core machine (``miniwob@1.2``'s builds) and collecting a trajectory a few
seconds, so the build takes about 100 minutes (about 55 at the 7 s a state that faster restores aim at); resume
makes it safe to interrupt."""

VERSIONS: tuple[DatasetVersion, ...] = (V1_1, V1_2, V2_0)
