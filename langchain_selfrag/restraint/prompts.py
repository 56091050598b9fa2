"""The prompts of "LLMs can learn self-restraint through iterative self-reflection" (Table 4),
as ``str.format`` templates.

The words are Table 4's, verbatim. The table prints each prompt on one line; the line breaks here
(before ``Facts:``, ``Claim:``, ``Probability:``, ``Entity:``, ``Sentence:``, ``Claims:``) follow
the layout of the paper's claim-splitting example (appendix A.1.1), so that collapsing the
whitespace of a template gives the table's text exactly. Fields: ``{entity}``, ``{facts}``,
``{sources}``, ``{claim}``, ``{sentence}``.
"""

from __future__ import annotations

from collections.abc import Sequence

#: P_write: the plain request.
P_WRITE = "Write a biography of {entity} of up to 4 sentences."

#: P_safe write: the "safety prompted" baseline.
P_SAFE_WRITE = (
    "Write a biography of {entity} of up to 4 sentences. If you do not know who that is, do not answer."
)

#: P_rewrite: self-prompting with the claims believed true (``{facts}``: :func:`format_facts`).
P_REWRITE = (
    "Write a biography of {entity} of up to 4 sentences. The biography should include, but not be limited to, "
    "the following facts.\nFacts:\n{facts}"
)

#: P_eval: a verbalised probability (0-100) of a claim given sentences of other samples.
P_EVAL = (
    "{sources}\nBased on these sources, what is the probability of the following claim concerning {entity} "
    "being true?\nClaim: {claim}\nProbability:"
)

#: P_splitter: one sentence into independent claims that each name the entity.
P_SPLITTER = (
    "Please breakdown the following sentence into independent claims. Each claim must be understandable as an "
    "independent sentence, and start explicitly with the name of the entity.\nEntity: {entity}\n"
    "Sentence: {sentence}\nClaims:"
)

#: The claim-splitting example of appendix A.1.1 (an optional one-shot demonstration for P_splitter).
SPLITTER_EXAMPLE = (
    "Entity: Michael Collins\n"
    "Sentence: Michael Collins (born October 31, 1930) is a retired American astronaut and test pilot who was "
    "the Command Module Pilot for the Apollo 11 mission in 1969.\n"
    "Claims:\n"
    "- Michael Collins was born on October 31, 1930.\n"
    "- Michael Collins is retired.\n"
    "- Michael Collins is an American.\n"
    "- Michael Collins was an astronaut.\n"
    "- Michael Collins was a test pilot.\n"
    "- Michael Collins was the Command Module Pilot for the Apollo 11 mission in 1969."
)

#: The abstention answer of the policy (U = 0), in the style of the paper's examples (Table 13-16).
ABSTENTION = "I am sorry, I am unable to provide a biography of {entity}."


def format_facts(claims: Sequence[str]) -> str:
    """Claims as ``"- claim"`` lines (P_rewrite's ``{facts}``)."""
    return "\n".join(f"- {' '.join(c.split())}" for c in claims)


def format_sources(sentences: Sequence[str]) -> str:
    """Sentences of earlier samples as ``"- sentence"`` lines (P_eval's ``{sources}``)."""
    return format_facts(sentences)


def splitter_prompt(entity: str, sentence: str, *, example: bool = False) -> str:
    """P_splitter for one sentence; with ``example`` the A.1.1 demonstration goes first."""
    prompt = P_SPLITTER.format(entity=entity, sentence=sentence)
    if not example:
        return prompt
    head, _, tail = prompt.partition("\nEntity:")
    return f"{head}\n{SPLITTER_EXAMPLE}\n\nEntity:{tail}"
