"""The errors of an evaluation run: bad input data, and a run that cannot proceed."""


class DatasetError(ValueError):
    """An evaluation file is missing, malformed, or of an unknown format."""


class EvalError(RuntimeError):
    """An evaluation run cannot proceed (mismatched resume, nothing to retrieve from)."""
