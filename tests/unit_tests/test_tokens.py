"""Reflection-token groups, stripping, parsing and neutralisation."""

from langchain_selfrag import tokens as T


def test_fifteen_tokens_in_checkpoint_order():
    assert len(T.REFLECTION_TOKENS) == 15
    assert len(set(T.REFLECTION_TOKENS)) == 15
    assert T.REFLECTION_TOKENS[0] == "[No Retrieval]"
    assert T.REFLECTION_TOKENS[-1] == "[No support / Contradictory]"
    assert sum(len(g) for g in T.GROUPS.values()) == 15


def test_strip_removes_all_tokens_and_evidence():
    raw = (
        "[Retrieval]<paragraph>Doc\nevidence</paragraph>[Relevant]Paris is the capital."
        "[Fully supported][Continue to Use Evidence]It is big.[Utility:5]</s>"
    )
    assert T.strip_reflection_tokens(raw) == "Paris is the capital.It is big."
    for tok in T.REFLECTION_TOKENS:
        assert tok not in T.strip_reflection_tokens(f"a {tok} b")


def test_parse_generation_segments():
    raw = (
        "[Retrieval]<paragraph>Doc\nevidence</paragraph>[Relevant]Paris is the capital.[Fully supported]"
        "[Continue to Use Evidence]It is big.[Partially supported]"
        "[No Retrieval]Thanks.[Utility:4]"
    )
    segs = T.parse_generation(raw)
    assert [s.retrieve for s in segs] == [T.RETRIEVAL, T.CONTINUE, T.NO_RETRIEVAL]
    assert segs[0].paragraph == "Doc\nevidence"
    assert segs[0].isrel == T.RELEVANT and segs[0].issup == T.FULLY_SUPPORTED
    assert segs[0].text == "Paris is the capital."
    assert segs[1].issup == T.PARTIALLY_SUPPORTED
    assert segs[2].isuse == "[Utility:4]"
    assert T.answer_text(segs) == "Paris is the capital. It is big. Thanks."


def test_parse_malformed_never_raises():
    segs = T.parse_generation("[Retrieval]<paragraph>unclosed evidence [Relevant]")
    assert segs[0].paragraph == "unclosed evidence [Relevant]"
    assert T.parse_generation("") == []
    assert T.parse_generation("plain text")[0].text == "plain text"


def test_neutralise_keeps_visible_text_and_breaks_matches():
    text = "See [Fully supported] and <paragraph> here"
    safe = T.neutralise(text)
    assert safe.replace("\u200b", "") == text
    assert T.find_reflection_tokens(safe) == []
    assert T.parse_generation(safe)[0].issup is None


def test_parse_token_ids_uses_ids_not_text():
    id_to_token = {100: T.RETRIEVAL, 101: T.RELEVANT, 102: T.FULLY_SUPPORTED}
    decode = {1: "Paris", 2: " [Irrelevant]"}.__getitem__

    def dec(ids):
        return "".join(decode(i) for i in ids)

    segs = T.parse_token_ids([100, 101, 1, 2, 102], id_to_token, dec)
    assert segs[0].isrel == T.RELEVANT  # the text "[Irrelevant]" is not a token
    assert segs[0].issup == T.FULLY_SUPPORTED
    assert "Irrelevant" in segs[0].text
