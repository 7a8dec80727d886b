"""The *Learned* family in the method registry: value functions trained on the train split.

Each unit hands its context to :func:`qval.learned.methods.run`, which scores with the newest model
of the method for the dataset (``ctx.options["model"]`` picks one) and trains one first when there is
none.  Training reads the train split's inputs and the environment only, never a label file.
"""

from __future__ import annotations

from qval.learned import methods as learned
from qval.learned.defaults import DEFAULT_FEATURISER
from qval.methods.registry import MethodContext, MethodOutput, method

_TARGETS = ("q", "v", "ranking")


@method("best-of-q", family="learned", targets=_TARGETS, modality="text", needs="none",
        description="IQL (expectile 0.7) Q and V networks on frozen features of the train split's transitions",
        params={"expectile": 0.7, "gamma": 0.99, "featuriser": DEFAULT_FEATURISER})
def best_of_q(ctx: MethodContext) -> MethodOutput:
    """Best-of-Q's IQL critic."""
    return learned.run("best-of-q", ctx)


@method("qlass", family="learned", targets=_TARGETS, modality="text", needs="none",
        description="QNet regressed on max-backup Q-values of exploration trees grown on train tasks",
        params={"gamma": 0.9, "featuriser": DEFAULT_FEATURISER})
def qlass(ctx: MethodContext) -> MethodOutput:
    """QLASS's QNet."""
    return learned.run("qlass", ctx)


@method("amc-value", family="learned", targets=_TARGETS, modality="text", needs="none",
        description="Agentic Monte Carlo value head on Monte-Carlo returns of sampled continuations",
        params={"featuriser": DEFAULT_FEATURISER})
def amc_value(ctx: MethodContext) -> MethodOutput:
    """Agentic Monte Carlo's value model."""
    return learned.run("amc-value", ctx)
