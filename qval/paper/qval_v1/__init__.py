"""The QVal v1.0 paper: its published results (:mod:`.published`; what the site imports of them,
:mod:`.importer`), the Kendall τ its tables print (:mod:`.tau`), its Table 6 (:mod:`.relabelled`), its method
settings (:mod:`.settings`) and the re-scoring of its reference summary files (:mod:`.reference`).  Its data
files are ``qval/data/qval-v1.0/``."""
