"""FrozenLake: Gymnasium's grid world (:mod:`.adapter`), its datasets (:mod:`.datasets`)."""

from pathlib import Path

from qval.envs.entry import EnvironmentEntry

from . import datasets

ENVIRONMENT = EnvironmentEntry(
    name="frozenlake",
    title="FrozenLake",
    description="Gymnasium's FrozenLake grid world: reach the goal without falling into a hole.",
    url="https://gymnasium.farama.org/environments/toy_text/frozen_lake/",
    folder=Path(__file__).parent,
    versions=datasets.VERSIONS,
    builders={"frozenlake": datasets.V1_2},
    open_book=True,  # an observation is the whole map: a shortest-path search labels it exactly
    best_of_n="frozenlake",
    methods=("goal-distance",),
)
