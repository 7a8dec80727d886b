"""QVal's built-in dense-supervision methods (see :mod:`qval.methods.registry` for the contract)."""
