"""The site's Best-of-N track (:mod:`qval.best_of_n` run as a job on the ``gpu`` queue): services and
selectors (:mod:`best_of_n.services`), the task that plays a run (:mod:`best_of_n.tasks`), the pages, the
staff form and ``manage.py best_of_n``. It sits above the catalogue (:mod:`leaderboard`) and the learned
methods (:mod:`learning`), whose trained models pick. Its models (:mod:`best_of_n.models`) keep the
tables they had when :mod:`leaderboard` declared them."""
