"""The default training parameters of the three learned methods.

Torch-free, so that the site (whose image has no torch) can show and check them; the trainers
(:mod:`qval.learned.trainers`) start from them.
"""

from __future__ import annotations

from typing import Any

DEFAULT_FEATURISER = "crossed"
"""The featuriser (a :func:`qval.learned.features.featuriser_from_spec` spec) of every learned run that names
none: the platform's reference training runs on each hosted dataset, the staff form, ``manage.py train_learned``
and the registry's learned methods.  ``crossed`` (state n-grams × action words, hashed into 1024 dimensions, on
top of the ``hashed`` n-grams) rather than ``hashed``: with the methods' own default settings on FrozenLake's
unseen maps it raised every method's test ρ (0.63–0.66 → 0.70–0.78), within-state ρ (0.38–0.55 → 0.57–0.67) and
N = 2 Best-of-N success (qlass 0.16 → 0.62, amc-value 0.35 → 0.55), as with the labeller's settings; hashed
features combine state and action only through the MLP and rank a state's candidates by one fixed order of moves.
On ALFWorld (best-of-q only) the two were level, test ρ 0.17 and no within-state ranking with either: a
coverage failure no featuriser fixes (``benchmarks/README.md``, "Learned features: the representation check").
``crossed`` rather than ``smollm2`` (SmolLM2-135M-Instruct's hidden states, the seed papers' kind of
representation): on the same unseen maps with the default settings SmolLM2's features were worse for every
method (qlass test ρ 0.64 against 0.78, within-state ρ 0.50 against 0.67, N = 2 success 0.25 against 0.62; amc-value
0.58 / 0.41 / 0.16 against 0.74 / 0.66 / 0.55), on an ALFWorld subsample (qlass, small trees) they were level
in test ρ (0.10 against 0.09) and behind within a state (−0.06 against 0.07), and their first encoding costs
minutes of CPU a dataset
(``benchmarks/README.md``, "SmolLM2 hidden states against crossed n-grams")."""

BEST_OF_Q: dict[str, Any] = {"tau": 0.7, "discount": 0.99, "steps": 1500, "batch_size": 128, "lr": 1e-3,
                             "weight_decay": 1e-4, "target_every": 100, "shared": 64,
                             "hidden": [128, 64], "dropout": 0.0, "branches": True, "epsilon": 0.3,
                             "branch_depth": 0}
"""``branches``: add every train state's candidates, each continued by the actor with ``epsilon`` noise to the
end of the episode (Best-of-Q's ε-greedy exploration data, its appendix: ε of 0.3 to 0.5).  ``branch_depth``: the
first that many new states each of those continuations visits offer every candidate too, each continued the same
way (:func:`qval.learned.experience.branch_transitions`), so that a picker's move off the actor's path meets
(state, move) pairs the data holds; 1 costs up to ``C`` times the continuations of 0 with ``C`` candidates a state.
0 by default: with exact (tabular) features and the labeller's ε = 0 it turned best-of-q's N = 2 Best-of-N gain on
FrozenLake's ``shared`` maps from −0.33 [−0.45, −0.20] to +0.15 [+0.08, +0.22], but with the platform's default
settings (``crossed``, ε = 0.3, FrozenLake's unseen maps) it did not help (N = 2 gain −0.61 [−0.72, −0.49] against
−0.53 [−0.65, −0.41], test ρ 0.70 both), and on ALFWorld or MiniWoB the extra continuations are expensive
(``benchmarks/README.md``, "Which failure it was", 5.).  No dropout: the
expectile loss turns the noise dropout adds to V(s) into an upward bias (with τ = 0.9, V's mean rises until
only a tenth of the noisy predictions overshoot), and the bootstrapped targets compound it step after step
(measured on FrozenLake with tabular features: Q 0.87 against the exact IQL fixed point's 0.65 with dropout
0.1, 0.67 without)."""
QLASS: dict[str, Any] = {"discount": 0.9, "width": 3, "depth": 2, "epsilon": 0.3, "max_roots": None,
                         "steps": 1500, "batch_size": 128, "lr": 1e-3, "weight_decay": 1e-4, "shared": 64,
                         "hidden": [128, 64], "dropout": 0.1}
AMC_VALUE: dict[str, Any] = {"discount": 0.95, "samples": 4, "epsilon": 0.3, "max_states": None, "steps": 1500,
                             "batch_size": 128, "lr": 1e-3, "weight_decay": 1e-4, "shared": 64,
                             "hidden": [128, 64], "dropout": 0.1, "every_step": True, "lora": False, "lora_rank": 8, "lora_alpha": 16.0,
                             "lora_lr": 1e-5, "branch_depth": 0}
"""``every_step``: every step of each sampled continuation is a point with its return-to-go (AMC's Eq. 7),
not only the state and its candidates; ``lora``: fine-tune LoRA adapters of a local backbone (featuriser ``local:PATH``) jointly with the head;
``lora_rank``, ``lora_alpha`` and ``lora_lr`` (the adapters' learning rate) as Agentic Monte Carlo's Table 7;
``branch_depth``: as best-of-q's, the first that many new states of each candidate's continuations offer their
candidates too (:meth:`~qval.envs.base.Environment.sample_candidates`), each scored by its own continuations, so that
a picker's move off the actor's path meets (state, move) pairs the data holds; 0 by default for the same reasons."""
