"""TerminalBench: shell tasks in Terminal-Bench's format, every command run in a podman sandbox (:mod:`.adapter`,
task files in ``tasks/``), its datasets (:mod:`.datasets`)."""

from pathlib import Path

from qval.envs.entry import EnvironmentEntry

from . import datasets

ENVIRONMENT = EnvironmentEntry(
    name="terminalbench",
    title="TerminalBench",
    description="Shell tasks in Terminal-Bench's format (an instruction, a scripted solution, tests that decide "
                "success): files and text, git, Python, archives, permissions and simple services, every command "
                "run in a podman sandbox; hosted as TerminalBench-lite, tasks written for QVal.",
    url="https://www.tbench.ai/",
    folder=Path(__file__).parent,
    versions=datasets.VERSIONS,
    builders={"terminalbench-lite": datasets.V1_1},
    # the instruction prints a hidden instance's parameter values: the public task file replayed labels it
    open_book=True,
    best_of_n="terminalbench-lite",
)
