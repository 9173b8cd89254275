"""The runner's own training loop pieces: the micro-batch updater (gradient
accumulation, per-phase timing) and the profile report of ``debug=profile``."""
