"""FrozenLake's dataset versions, oldest first (every one rebuilds with its published fingerprint)."""

from __future__ import annotations

from qval.build import DatasetSpec
from qval.envs.entry import DatasetVersion

ADAPTER = f"{__package__}.adapter:FrozenLake"

SPLIT_CYCLE: tuple[str, ...] = ("train", "dev", "train", "test", "train")
"""``frozenlake-8x8@1.1`` and ``1.2``: map ``j`` goes to ``SPLIT_CYCLE[j % 5]`` (train 3 : dev 1 : test 1)."""

V1_0 = DatasetVersion(
    DatasetSpec(
        slug="frozenlake-8x8",
        name="FrozenLake 8×8",
        version="1.0",
        description=(
            "Gymnasium FrozenLake 8×8 (is_slippery=False) on 8 random maps (generate_random_map seeds 42–49). "
            "50 trajectories of at most 30 steps by a shortest-path actor with ε=0.1 uniform noise; up to 5 "
            "states per trajectory (not the first or last turn); all 4 moves as candidates. Labels: restore "
            "the state, force the candidate, follow the shortest-path policy until the 30-step horizon "
            "(counted from the episode start); reward 1 at the goal, γ=0.95. Observation: the ASCII grid with "
            "@ for the agent. Dev and test alternate by trajectory within each map."
        ),
        modalities=("text",),
        num_trajectories=50,
        max_states_per_trajectory=5,
        epsilon=0.1,
        seed=42,
        discount=0.95,
        num_rollouts=1,
    ),
    ADAPTER,
    {"map_seeds": tuple(range(42, 50)), "size": 8, "horizon": 30},
)
"""``frozenlake-8x8@1.0`` (superseded by 1.1): the 8 random maps of seeds 42..49, text only, dev and test
alternating by trajectory within each map (so both splits share every map)."""

V1_1 = DatasetVersion(
    DatasetSpec(
        slug="frozenlake-8x8",
        name="FrozenLake 8×8",
        version="1.1",
        description=(
            "Gymnasium FrozenLake 8×8 (is_slippery=False) on 20 random maps (generate_random_map seeds 42–61). "
            "100 trajectories (5 per map) of at most 30 steps by a shortest-path actor with ε=0.1 uniform noise; up "
            "to 5 states per trajectory (not the first or last turn); all 4 moves as candidates. Labels: restore the "
            "state, force the candidate, follow the shortest-path policy until the 30-step horizon (counted from the "
            "episode start); reward 1 at the goal, γ=0.95. Observation: the ASCII grid with @ for the agent, and a "
            "512×512 RGB drawing of the same grid for every state and every candidate's next state. Train, dev and "
            "test hold disjoint maps: map j goes to (train, dev, train, test, train)[j mod 5], so 12 maps train, 4 "
            "dev and 4 test. Supersedes 1.0, whose dev and test shared maps."
        ),
        modalities=("text", "image"),
        num_trajectories=100,
        max_states_per_trajectory=5,
        epsilon=0.1,
        seed=42,
        discount=0.95,
        num_rollouts=1,
        splits=("train", "dev", "test"),
        split_by="task",
        split_cycle=SPLIT_CYCLE,
    ),
    ADAPTER,
    {"map_seeds": tuple(range(42, 62)), "size": 8, "horizon": 30},
)
"""``frozenlake-8x8@1.1`` (superseded by 1.2, whose test split is secret): 20 random maps split by map into
train/dev/test, text and 512×512 images."""

V1_2 = V1_1.derive(
    version="1.2",
    description=(
        "Gymnasium FrozenLake 8×8 (is_slippery=False), 20 maps; 100 trajectories (5 per map) of at most 30 "
        "steps by a shortest-path actor with ε=0.1 uniform noise; up to 5 states per trajectory (not the first "
        "or last turn); all 4 moves as candidates. Labels: restore the state, force the candidate, follow the "
        "shortest-path policy until the 30-step horizon (counted from the episode start); reward 1 at the goal, "
        "γ=0.95. Observation: the ASCII grid with @ for the agent and a 512×512 RGB drawing of it for every state "
        "and candidate next state, plus goal images: the drawing of the final state of the reference rollout "
        "from every state and candidate. Map j goes to (train, dev, train, test, train)[j mod 5]: the 12 train "
        "and 4 dev maps (generate_random_map seeds 42–61 at their positions) and their states are those of 1.1, "
        "byte for byte; the 4 test maps and the test trajectories' random draws come from the maintainer's "
        "secret, so the test split cannot be rebuilt from public information. Supersedes 1.1."
    ),
    secret_test=True,
    end_images=True,
)
"""``frozenlake-8x8@1.2``: 1.1's train and dev exactly, a test split drawn from the maintainer's secret (four
secret maps, secret RNG seeds), and goal images for every point."""

VERSIONS: tuple[DatasetVersion, ...] = (V1_0, V1_1, V1_2)
