"""The biography harness of ``selfrag eval bio``: self-restraint on "Who is X?"
("LLMs can learn self-restraint through iterative self-reflection", section 4).

* :mod:`.data`: the entities, their passages, the split by entity and invented people;
* :mod:`.systems`: the compared systems (prompted, Self-RAG, Self-RAG + restrain, ReSearch, trained models);
* :mod:`.judges`: the claim judges and their agreement with hand-labelled claims;
* :mod:`.metrics`: accuracy, abstention and utility with bootstrap intervals;
* :mod:`.report`: ``report.json``, ``report.md`` and the trade-off plot;
* :mod:`.run`: answers, judges and reports every system resumably (:func:`run_bio`);
* :mod:`.cli`: the ``selfrag eval bio`` flags and command.
"""
