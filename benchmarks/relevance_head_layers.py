"""Which layer of a frozen judge holds "the passage states the answer"? A probe for the relevance head (issue 55).

``training.relevance_head`` fits its head on the model's final hidden state at the IsRel question's last
token. This reads that token's residual stream after some of the model's blocks too (llama.cpp's
``l_out-N`` tensors, caught by the context's eval callback) for the first ``--limit`` pairs of a head
run's ``pairs.jsonl``, and reports, per layer, the grouped cross-validated AUC of a logistic head over
[the untrained judge's log-odds, that layer] on all pairs and on the contrasts of
:data:`training.relevance_head.CONTRASTS` (SQuAD's answerable against unanswerable questions, docs'
passages that state the answer against near misses)::

    python -m benchmarks.relevance_head_layers --run runs/relhead/q15 \\
        --judge-model qwen2.5-coder-1.5b-instruct --layers 8,12,16,20,24 --limit 350 \\
        --out benchmarks/results/relevance_head_layers_q15.json

Layer states are cached in ``<run>/layers/`` (resumable); the final state is the run's own ``features/``.
The results file (``benchmarks/record.py``) keys each layer's figures by the L2 weight (``l2_0p3``: 0.3).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script from a checkout (the command its results file records)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def layer_reader(model_path: Path, layers: Sequence[int], threads: int):
    """A function: prompt -> (len(layers), n_embd) last-token states after those blocks."""
    import llama_cpp
    from llama_cpp import llama_cpp as lib

    from training.core.hidden_states import LlamaCppHiddenStates

    ggml = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
    ggml.ggml_get_name.restype, ggml.ggml_get_name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    ggml.ggml_get_data.restype, ggml.ggml_get_data.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    ggml.ggml_nelements.restype, ggml.ggml_nelements.argtypes = ctypes.c_int64, [ctypes.c_void_p]
    wanted = {f"l_out-{n}".encode(): i for i, n in enumerate(layers)}
    caught: dict[int, np.ndarray] = {}
    width = [0]

    @lib.ggml_backend_sched_eval_callback
    def catch(tensor, ask, _user):  # pragma: no cover - called from llama.cpp
        name = ggml.ggml_get_name(tensor)
        if ask:
            return name in wanted
        if name in wanted:
            rows = ggml.ggml_nelements(tensor) // width[0]
            address = ggml.ggml_get_data(tensor) + (rows - 1) * width[0] * 4  # f32, the last token's row
            caught[wanted[name]] = np.ctypeslib.as_array((ctypes.c_float * width[0]).from_address(address)).copy()
        return True

    states = LlamaCppHiddenStates(model_path, n_threads=threads, cb_eval=catch)
    width[0] = states.n_embd

    def read(prompt: str) -> np.ndarray:
        caught.clear()
        states.last_hidden([prompt])
        return np.stack([caught[i] for i in range(len(layers))])

    read.keep = catch  # the callback must outlive the context
    return read


def grouped_cv(x: np.ndarray, y: np.ndarray, groups: Sequence[str], l2: float, folds: int = 5) -> np.ndarray:
    """Held-out scores of :func:`training.relevance_head.fit_logistic` (column 0 unpenalised), a
    question's pairs in one fold."""
    from training.relevance_head import fit_logistic

    names = sorted(set(groups))
    random.Random(0).shuffle(names)
    fold_of = {g: i % folds for i, g in enumerate(names)}
    fold = np.array([fold_of[g] for g in groups])
    scores = np.zeros(len(y))
    for k in range(folds):
        train, test = fold != k, fold == k
        w = fit_logistic(x[train], y[train], l2)
        scores[test] = np.hstack([x[test], np.ones((test.sum(), 1))]) @ w
    return scores


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.record import Run
    from langchain_selfrag.graph.context import model_path
    from langchain_selfrag.questions import ReflectionQuestions
    from training.relevance_head import (answer_direction, auc, contrast_aucs, isrel_prompt, isrel_words, load_features,
                                        pair_turn)

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="a training.relevance_head output folder (pairs.jsonl, features/)")
    ap.add_argument("--judge-model", required=True)
    ap.add_argument("--layers", default="8,12,16,20,24")
    ap.add_argument("--limit", type=int, default=350)
    ap.add_argument("--l2", default="0.3,1,3")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    run, layers = Path(args.run), [int(n) for n in args.layers.split(",")]
    path = Path(model_path(args.judge_model))
    pairs = [json.loads(line) for line in (run / "pairs.jsonl").read_text().splitlines()[: args.limit]]
    folder = run / "layers"
    folder.mkdir(exist_ok=True)
    read, blocks, started = None, [], time.monotonic()
    for start in range(0, len(pairs), 50):
        chunk = folder / f"{start:06d}.npy"
        part = pairs[start : start + 50]
        if chunk.is_file() and len(block := np.load(chunk)) >= len(part) and block.shape[1] == len(layers):
            blocks.append(block[: len(part)])
            continue
        read = read or layer_reader(path, layers, args.threads)
        block = np.stack([read(isrel_prompt(pair_turn(p))) for p in part])
        np.save(chunk, block)
        blocks.append(block)
        print(f"layers {start + len(part)}/{len(pairs)} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    states = np.concatenate(blocks).astype(np.float64)
    final = load_features(run / "features", isrel_prompt, pairs).astype(np.float64)
    from training.core.hidden_states import LlamaCppHiddenStates

    vocab = LlamaCppHiddenStates(path, n_ctx=64)
    ids = [vocab.tokenize(w, add_bos=False)[0] for w in isrel_words(ReflectionQuestions())]
    vocab.close()
    untrained = final @ answer_direction(path, *ids)
    y = np.array([p["label"] for p in pairs], dtype=float)
    variants, groups = [p["variant"] for p in pairs], [p["question"] for p in pairs]
    untrained_contrasts = contrast_aucs(variants, y, untrained, untrained)
    report = {"pairs": len(pairs), "model": path.name, "untrained": {
        "auc": round(auc(y, untrained), 4), **{k: v["untrained_auc"] for k, v in untrained_contrasts.items()}}, "layers": {}}
    named = {f"l_out-{n}": states[:, i] for i, n in enumerate(layers)} | {"final": final}
    for name, h in named.items():
        x = np.hstack([untrained[:, None], (h - h.mean(0)) / (h.std(0) + 1e-6)])
        report["layers"][name] = {}
        for l2 in (float(v) for v in args.l2.split(",")):
            scores = grouped_cv(x, y, groups, l2)
            report["layers"][name][f"l2_{l2:g}".replace(".", "p")] = {"auc": round(auc(y, scores), 4), **{
                k: v["head_auc"] for k, v in contrast_aucs(variants, y, untrained, scores).items()}}
    Run("relevance_head_layers").write(args.out, vars(args), report)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
