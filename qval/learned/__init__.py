"""The *Learned* family: value functions trained on a dataset's train split, then used as scoring methods.

Three methods, each trained on frozen features of the text state, action and task and on
experience gathered in the dataset's own environment from **train** tasks only:

* ``best-of-q`` (:func:`qval.learned.trainers.train_best_of_q`): Implicit Q-Learning on the
  transitions ``(s, a, r, s')`` of the train split's trajectories (re-collected with the
  dataset's seeded actor) and of every candidate of its sampled states continued by the
  ε-greedy actor to the end; expectile
  ``tau`` (0.7), Q and V networks that project state, action and task embeddings separately
  into a shared space and then run an MLP, a slow target Q network.
* ``qlass`` (:func:`qval.learned.trainers.train_qlass`): a QNet regressed on Q-values of
  exploration trees grown from the train states with the environment's restore and
  candidate sampler, backed up with ``Q = r + γ·max over children`` (γ = 0.9).
* ``amc-value`` (:func:`qval.learned.trainers.train_amc_value`): the Agentic Monte Carlo
  value model, a value head regressed on the mean discounted return of sampled
  continuations (the ε-noisy actor) after each train state and each of its candidates, and on
  the return-to-go of every later step of those continuations; with
  ``lora`` and a local checkpoint (featuriser ``local:PATH``) LoRA adapters of the backbone are
  fine-tuned jointly with the head (:mod:`qval.learned.lora`).

Nothing here reads a label file: the dataset's inputs come from :func:`qval.learned.data.read_inputs`
(``states.jsonl`` and ``candidates.jsonl``); rewards come from the environment.

Modules: :mod:`~qval.learned.data` (label-free inputs), :mod:`~qval.learned.features`
(hashed n-grams, crossed state × action n-grams, exact tabular grid features, SmolLM2-135M-Instruct's hidden states, an ``/v1/embeddings`` endpoint, the per-fingerprint cache),
:mod:`~qval.learned.experience` (trajectories, trees, Monte-Carlo returns),
:mod:`~qval.learned.nets`, :mod:`~qval.learned.lora` and :mod:`~qval.learned.trainers` (torch), :mod:`~qval.learned.store`
(content-hashed weights, scoring) and :mod:`~qval.learned.methods` (train + score entry points
for the method registry and the site).  Django-free.
"""
