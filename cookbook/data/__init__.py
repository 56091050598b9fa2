"""Data builders shared by recipes and experiments (no shipped build's data came from them yet:
the bundled ``selfrag-smollm2-135m``'s data is ``cookbook.selfrag_smollm2.build_data``'s).

Each module is a command, ``python -m cookbook.data.NAME --help``; the dated runs that used them
are in ``cookbook/EXPERIMENTS.md``.
"""
