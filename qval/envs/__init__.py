"""Environment adapters: the interface (:mod:`.base`) and its implementations."""

from .base import Environment, EpisodeOver, Snapshot, StepResult
from .frozenlake import FrozenLake, FrozenLakeSnapshot

__all__ = ["Environment", "EpisodeOver", "FrozenLake", "FrozenLakeSnapshot", "Snapshot", "StepResult"]
