"""Runnable recipes (``python -m cookbook.<recipe>.<step>``); see ``cookbook/README.md``."""
