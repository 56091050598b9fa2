"""Does a model read the passage that holds the answer, in the Self-RAG prompt and in its own chat format?

For each answerable question of the trust suite's docs kind, the ~700-character window of its document
around the first gold answer found there is given to the model (llama.cpp, greedy, 48 tokens), in one of
three layouts; right = a gold answer in the output (case ignored):

- ``selfrag``: the Self-RAG prompt, ``### Instruction: … ### Response:\\n[Retrieval]<paragraph>…</paragraph>[Relevant]``;
- ``chat``: the ChatML turn (Qwen's): the passage and the question in the user turn, as the ``chatml``
  prompt layout asks for the answer (:data:`~langchain_selfrag.questions.INSTRUCTION_FIRST_WITH_PASSAGE`);
- ``chat_selfrag``: the question in the user turn, the Self-RAG evidence and ``[Relevant]`` in the assistant's.

``--ban-reflection`` keeps the model from writing its reflection tokens (a base whose new rows would
otherwise fire in a layout it was not fitted on). It tells whether a build's reading is lost to the
prompt layout or to training (issue 55).

    python benchmarks/format_reading.py --model runs/qwen/h1.gguf --form selfrag --form chat --ban-reflection \\
        --json benchmarks/results/format_reading_h1.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.record import Run  # noqa: E402
from benchmarks.trust_suite import suite_questions  # noqa: E402
from langchain_selfrag import tokens as T  # noqa: E402
from langchain_selfrag.chatml import chatml  # noqa: E402
from langchain_selfrag.prompts import build_instruction, format_prompt, with_evidence  # noqa: E402
from langchain_selfrag.questions import INSTRUCTION_FIRST_WITH_PASSAGE, ReflectionQuestions, Turn, fill  # noqa: E402

FORMS = ("selfrag", "chat", "chat_selfrag")
WINDOW = 700


def gold_window(text: str, answers: list[str], width: int = WINDOW) -> str | None:
    """The ``width`` characters of ``text`` centred on the first gold answer found in it (case ignored)."""
    for answer in answers:
        at = text.lower().find(answer.lower())
        if at >= 0:
            start = max(0, at - width // 2)
            return text[start : start + width]
    return None


def layout(form: str, question: str, title: str, window: str) -> str:
    """The prompt of one layout (see the module docstring)."""
    if form == "selfrag":
        return with_evidence(format_prompt(build_instruction(question)), title, window) + T.RELEVANT
    system = ReflectionQuestions.system
    if form == "chat":  # the chatml layout's answer request
        return chatml(system, fill(INSTRUCTION_FIRST_WITH_PASSAGE, Turn(question, "", title, window)))
    if form == "chat_selfrag":
        return with_evidence(chatml(system, question), title, window) + T.RELEVANT
    raise ValueError(f"form must be one of {', '.join(FORMS)}, not {form!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a GGUF file")
    ap.add_argument("--form", action="append", choices=FORMS, help="layouts to measure (default: all)")
    ap.add_argument("--ban-reflection", action="store_true", help="the model may not write a reflection token")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the results file here")
    args = ap.parse_args(argv)
    run = Run("format_reading")
    from llama_cpp import Llama

    docs, questions = suite_questions("docs", "validation", None, 0, 0)
    items = []
    for q in questions:
        if q["part"] != "answerable":
            continue
        window = gold_window(docs[q["source"]], q["answers"])
        if window is not None:
            items.append((q, window))
    llm = Llama(model_path=args.model, n_ctx=2048, n_threads=args.threads, verbose=False)
    single = [ids for tok in T.REFLECTION_TOKENS if len(ids := llm.tokenize(tok.encode(), add_bos=False, special=True)) == 1]
    banned = {ids[0]: -1000.0 for ids in single} if args.ban_reflection else None
    figures: dict = {"questions": len(items), "forms": {}}
    for form in args.form or FORMS:
        right, outputs = 0, []
        for q, window in items:
            text = llm.create_completion(layout(form, q["question"], q["source"], window), max_tokens=args.max_tokens,
                                         temperature=0.0, logit_bias=banned)["choices"][0]["text"]
            ok = any(a.lower() in text.lower() for a in q["answers"])
            right += ok
            outputs.append({"question": q["question"], "right": ok, "output": text})
        figures["forms"][form] = {"right": right, "examples": outputs[:5]}
        print(f"{form:13s} right {right}/{len(items)}")
    if args.json:
        settings = {"model": args.model, "forms": args.form or list(FORMS), "ban_reflection": args.ban_reflection,
                    "max_tokens": args.max_tokens, "window_chars": WINDOW}
        run.write(args.json, settings, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
