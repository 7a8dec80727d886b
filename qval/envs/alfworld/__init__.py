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
    # pick & place's prompts, 2026-12-01 (benchmarks/README.md): 5.8 times FrozenLake's grid for these nine together
    method_cpu_seconds={"verifier": (0, 43.2), "direct-batched": (0, 9.5), "direct-single": (0, 9.8),
                        "gvl": (0, 17.7), "ranking": (0, 37.0), "Δbelief": (0, 49.8), "direct-sequential": (0, 15.7),
                        "sdpo": (0, 33.5), "sdpo-gt": (0, 33.8)},
)
