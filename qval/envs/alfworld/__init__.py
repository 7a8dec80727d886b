"""ALFWorld: household tasks in TextWorld's PDDL engine on generated scenes (:mod:`.adapter`, images drawn by
:mod:`.image`), its datasets (:mod:`.datasets`)."""

from pathlib import Path

from qval.envs.entry import EnvironmentEntry

from . import datasets

ENVIRONMENT = EnvironmentEntry(
    name="alfworld",
    title="ALFWorld",
    description="Household tasks aligned with the ALFRED embodied benchmark: find, pick up and place objects by "
                "typed commands (TextWorld engine); observed as text or as rendered images.",
    url="https://alfworld.github.io/",
    folder=Path(__file__).parent,
    versions=datasets.VERSIONS,
    builders={"alfworld": datasets.PICK_PLACE_V1_1, "alfworld-all-types": datasets.ALL_TYPES_V1_1},
    best_of_n="alfworld",
)
