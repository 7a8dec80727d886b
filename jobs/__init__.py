"""The machinery every long job shares, below every app: heartbeats, the lost-job reaper, requeueing once,
and the sending of a run's message (:mod:`jobs.heartbeat`). Each kind keeps its own states and services:
submissions (:mod:`submissions.lifecycle`), training runs (:mod:`learning.services`), Best-of-N runs
(:mod:`best_of_n.services`)."""
