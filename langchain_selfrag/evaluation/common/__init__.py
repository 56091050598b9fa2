"""What both evaluation harnesses (:mod:`..qa` and :mod:`..bio`) share.

* :mod:`.errors`: :class:`DatasetError` (bad input) and :class:`EvalError` (a run cannot proceed);
* :mod:`.selection`: the first N or a seeded sample of the questions (``--limit`` / ``--sample``);
* :mod:`.records`: the resumable per-system JSONL files of finished questions;
* :mod:`.cache`: :class:`CachingLM`, model calls shared by the systems run on one question;
* :mod:`.models`: the models a run loads from the command line (reflection LM, chat model);
* :mod:`.bootstrap`: percentile bootstrap and paired differences over questions;
* :mod:`.report`: writing ``report.json`` and ``report.md``.
"""
