"""The Self-RAG graph nodes (Asai et al., ICLR 2024: Algorithm 1 and section 3.3), one module each.

* :mod:`.prepare`: check the input, build the prompt, reset the search;
* :mod:`.decide`: ``decide_retrieval``, whether each beam retrieves before its next segment;
* :mod:`.retrieve`: ``retrieve`` (sync and async), passages from the retriever or the given ones;
* :mod:`.generate`: one batched generation per step, the short-form answer streamed as it comes;
* :mod:`.critique`: ``grade_relevance``, ``grade_support``, ``grade_utility`` (IsRel, IsSup, IsUse);
* :mod:`.rank`: score the candidates, expand the beams, stream the settled long-form segments;
* :mod:`.corrective`: ``correct``, corrective retrieval rounds (rewrite the question, then a fallback);
* :mod:`.select`: pick the answer and its citations (:mod:`.citations`: which segments cite);
* :mod:`.abstain`: when the graph abstains, and the ``abstain`` node;
* :mod:`.restrain`: self-restraint (knob ``rho``) over :mod:`langchain_selfrag.restraint`;
* :mod:`.common`: what they share (the run's context, stream events, the step budget).

The routers between them are in :mod:`langchain_selfrag.graph.routes`, the wiring in
:mod:`langchain_selfrag.graph.builder`; the public names are exported by :mod:`langchain_selfrag.graph`.

Every node has the signature ``node(state: SelfRAGState, runtime: Runtime[SelfRAGContext]) -> dict``
and returns a partial state update, so it can be used in any LangGraph graph whose state has the
keys it reads. Critique events go to ``runtime.stream_writer`` (LangGraph ``custom`` stream mode)
as dicts with an ``"event"`` key; they never enter the answer.

Control flow reads probabilities and ``Generation.stop_reason`` only, never decoded text.

Documented fallbacks for models that emit malformed or missing reflection tokens:

* no IsRel probabilities at the first generated position -> scored with ``lm.candidate_probs``;
  if that is also empty, IsRel = 0 (irrelevant);
* no IsSup token after an evidence segment -> IsSup = 0 (the paper's rule) and no hard-constraint
  drop; no IsUse token -> IsUse = 0;
* a candidate whose text is empty once reflection tokens are stripped is never selected while
  another has text; if none has text the graph abstains;
* an LM whose ``generate`` does not take ``guard`` / ``stop_at_segment`` (an older backend) is
  called without them; its candidates record ``decoding_guard`` False.

Streaming: a short-form answer generated without evidence whose text is sure to become the final
answer goes out token by token as ``{"event": "token", "text": piece}`` while it is decoded (see
:class:`.generate.AnswerTokens`); in long form each segment that every beam shares, and so every
answer will start with, goes out as ``{"event": "segment", "text": piece, "index": n}`` from
``rank``. The pieces concatenate to a prefix of the final ``answer``; nothing is streamed when the
run could still abstain or rewrite the answer (self-restraint).

Long form (paper section 3.3): a segment ends at the model's next Retrieve-group token
([Retrieval], [No Retrieval], [Continue to Use Evidence]), at end of sequence or at
``max_new_tokens``. The retrieve decision is taken again before every segment, evidence is
fetched again for it (given passages are re-ranked against the segment query), and a
[Continue to Use Evidence] segment keeps the beam's current passage.
"""
