"""The machinery every job shares, below every app: the abstract job models (:mod:`jobs.models`), the lifecycle of
each kind -- claim, heartbeat (:mod:`jobs.heartbeat`), finish, fail, requeue once, the reaper -- (:mod:`jobs.services`),
the registry of kinds the one reaper walks (:mod:`jobs.registry`), and a job's progress for its page
(:mod:`jobs.progress`, drawn by ``templates/jobs/_progress.html``)."""
