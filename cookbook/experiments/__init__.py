"""One-off experiments whose builds did not ship (their runs and verdicts: ``cookbook/EXPERIMENTS.md``)."""
