"""The default training parameters of the three learned methods.

Torch-free, so that the site (whose image has no torch) can show and check them; the trainers
(:mod:`qval.learned.trainers`) start from them.
"""

from __future__ import annotations

from typing import Any

BEST_OF_Q: dict[str, Any] = {"tau": 0.7, "discount": 0.99, "steps": 1500, "batch_size": 128, "lr": 1e-3,
                             "weight_decay": 1e-4, "target_every": 100, "shared": 64,
                             "hidden": [128, 64], "dropout": 0.0, "branches": True, "epsilon": 0.3}
"""``branches``: add every train state's candidates, each continued by the actor with ``epsilon`` noise to the
end of the episode (Best-of-Q's ε-greedy exploration data, its appendix: ε of 0.3 to 0.5).  No dropout: the
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
                             "lora_lr": 1e-5}
"""``every_step``: every step of each sampled continuation is a point with its return-to-go (AMC's Eq. 7),
not only the state and its candidates; ``lora``: fine-tune LoRA adapters of a local backbone (featuriser ``local:PATH``) jointly with the head;
``lora_rank``, ``lora_alpha`` and ``lora_lr`` (the adapters' learning rate) as Agentic Monte Carlo's Table 7."""
