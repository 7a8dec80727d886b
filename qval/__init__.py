"""QVal core: dataset schema, environments, labelling, metrics and scoring (no Django)."""
