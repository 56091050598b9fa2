"""The QA harness of ``selfrag eval DATASET``: Self-RAG against its baselines and ablations.

* :mod:`.data`: :class:`Example`, :class:`Passage`, :class:`Dataset`;
* :mod:`.loaders`: SQuAD v2, Self-RAG JSONL, PopQA, ARC, SelfAware and plain JSONL files;
* :mod:`.retrieval`: candidate passages (the given ``ctxs`` or a pooled Chroma collection);
* :mod:`.systems`: the compared systems; :mod:`.runner`: runs them resumably;
* :mod:`.metrics`: answer, abstention, citation and latency metrics; :mod:`.report`: the report;
* :mod:`.sweeps`: threshold and IsSup-weight sweeps replayed from recorded runs;
* :mod:`.abstention`: negative rejection (noise-only passages) and the abstention-bar sweep;
* :mod:`.cli`: the ``selfrag eval DATASET`` command (its flags live in :mod:`..cli`).
"""
