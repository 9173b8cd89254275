"""Process-level concerns: aborting the job on failure, collective deadlines,
the per-rank operation log, rank-aware logging and device choice."""
