"""Fit a model's abstention bars on questions about the user's own documents (``selfrag calibrate``).

:mod:`.questions` makes labelled questions from documents (answerable, near misses, off topic);
:mod:`.fit` asks them once with the bars off and picks the bars offline; the result is an
:class:`~langchain_selfrag.abstention.AbstentionCalibration` written beside the model file.
"""

from .fit import calibration, choose, collect
from .questions import OFF_TOPIC, LabelledQuestion, load_questions, questions_from_documents

__all__ = ["OFF_TOPIC", "LabelledQuestion", "calibration", "choose", "collect", "load_questions",
           "questions_from_documents"]
