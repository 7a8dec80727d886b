"""MiniWoB++: web tasks in a real browser through BrowserGym (:mod:`.adapter`), its datasets (:mod:`.datasets`)."""

from pathlib import Path

from qval.envs.entry import EnvironmentEntry

from . import datasets

ENVIRONMENT = EnvironmentEntry(
    name="miniwob",
    title="MiniWoB++",
    description="Web interaction tasks (click, type, choose) in a real browser through BrowserGym; text "
                "(accessibility tree) and screenshots with set-of-marks element ids.",
    url="https://miniwob.farama.org/",
    folder=Path(__file__).parent,
    versions=datasets.VERSIONS,
    builders={"miniwob": datasets.V2_0},
    # the goal states what success needs and the tree shows the page: a seed search matches an instance
    # (enter-text, use-spinner: tens of seeds), replayed and labelled by the public labeller
    open_book=True,
    best_of_n="miniwob",
)
