"""Reflection LM on Hugging Face transformers: CUDA when present, else CPU; prompts batched."""

from __future__ import annotations

import copy
import inspect
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..prompt_layouts import CONFIG_KEY
from .base import ReflectionLMBase
from ..layout_record import folder_record, layout_of_sources, path_record
from .protocol import ReflectionLMError
from .stopping import stop_hooks


class TransformersReflectionLM(ReflectionLMBase):
    """Any causal LM directory, GGUF file or hub id, with an optional PEFT adapter.

    Prompts of one call go through the model as one left-padded batch (split into chunks of
    ``batch_size``). Only the logits that are needed are computed: the last position while
    decoding, the candidate positions when scoring continuations. Sampling
    (``generate(temperature=...)``) draws each row's token from its last logits with that prompt's
    seeded numpy stream (:class:`~langchain_selfrag.lm.sampling.TokenSampler`, the sampler every
    backend shares), so samples do not depend on the batch a prompt lands in nor on the device's RNG.

    ``tokenize`` and ``decode`` may be called from any thread beside a running model call. A fast
    tokenizer changes its padding and truncation state when a call asks for other settings than
    the last one (another thread's use then fails with "Already borrowed"), so this backend's
    tokenizer calls never overlap: they take a lock of their own, held for one tokenizer call only,
    never for a forward pass.
    """

    def __init__(
        self,
        model: str | os.PathLike | Any,
        *,
        tokenizer: Any | None = None,
        adapter: str | os.PathLike | None = None,
        device: str | None = None,
        dtype: Any | None = None,
        gguf_file: str | None = None,
        batch_size: int = 8,
        local_files_only: bool | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if dtype is None:
            dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        #: the model file, folder or hub id (what a per-model calibration is keyed by), None for a loaded model
        self.model_path = str(model) if isinstance(model, (str, os.PathLike)) else None
        given_path = self.model_path
        if isinstance(model, (str, os.PathLike)):
            path = Path(model)
            if path.suffix == ".gguf" and path.is_file():
                gguf_file, model = path.name, str(path.parent)
            kwargs: dict[str, Any] = {}
            if gguf_file:
                kwargs["gguf_file"] = gguf_file
            if local_files_only is None:
                local_files_only = Path(str(model)).exists()
            try:
                tok = tokenizer or AutoTokenizer.from_pretrained(str(model), local_files_only=local_files_only, **kwargs)
                net = AutoModelForCausalLM.from_pretrained(
                    str(model), dtype=dtype, local_files_only=local_files_only, **kwargs
                )
            except (OSError, ValueError) as exc:
                raise ReflectionLMError(f"could not load a causal LM from {model!r}: {exc}") from exc
        else:
            if tokenizer is None:
                raise ValueError("pass tokenizer= together with a model object")
            net, tok = model, tokenizer
        if adapter is not None:
            from peft import PeftModel

            net = PeftModel.from_pretrained(net, str(adapter))
        self.model = net.to(self.device).eval()
        self.prompt_layout = layout_of_sources(folder_record(adapter) if adapter is not None else None,
                                               getattr(net.config, CONFIG_KEY, None), path_record(given_path))
        self.tokenizer = tok
        self._tokenizer_lock = threading.Lock()  # held while the tokenizer runs, never across a forward pass
        self.batch_size = batch_size
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
        bos = tok.bos_token_id
        probe = tok("a", add_special_tokens=True)["input_ids"]
        self._bos = [bos] if bos is not None and probe[:1] == [bos] else []
        forward = getattr(self.model, "get_base_model", lambda: self.model)().forward
        self._keeps_logits = "logits_to_keep" in inspect.signature(forward).parameters
        self._init_reflection_vocab()
        self._groups = self._group_ids()
        self._reflection_list = sorted(self._groups)

    @property
    def context_length(self) -> int | None:
        """The model config's ``max_position_embeddings`` (or ``n_positions``); None when absent."""
        config = getattr(self.model, "config", None)
        for name in ("max_position_embeddings", "n_positions"):
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 0:
                return value
        return None

    # -- tokenizer -----------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        with self._tokenizer_lock:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return (self._bos if add_bos else []) + list(ids)

    def decode(self, ids: Sequence[int]) -> str:
        with self._tokenizer_lock:
            return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def _eos_ids(self) -> Sequence[int]:
        eos = self.tokenizer.eos_token_id
        extra = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids = {eos} if eos is not None else set()
        if isinstance(extra, int):
            ids.add(extra)
        elif isinstance(extra, (list, tuple)):
            ids.update(extra)
        return sorted(ids)

    def _special_ids(self) -> Sequence[int]:
        return list(self.tokenizer.all_special_ids)

    # -- model calls ----------------------------------------------------------------------------
    def _left_pad(self, seqs: list[list[int]]):
        torch = self._torch
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, seq in enumerate(seqs):
            ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids.to(self.device), mask.to(self.device), positions.to(self.device)

    def _forward(self, ids, mask, positions, keep: int, past=None):
        kwargs: dict[str, Any] = {"attention_mask": mask, "position_ids": positions, "use_cache": past is not False}
        if past not in (None, False):
            kwargs["past_key_values"] = past
        if self._keeps_logits:
            kwargs["logits_to_keep"] = keep
        out = self.model(input_ids=ids, **kwargs)
        return out.logits[:, -keep:, :].float(), getattr(out, "past_key_values", None)

    def _continuation_logprobs(self, prompt_ids: list[list[int]], continuations: list[list[int]]) -> list[float]:
        torch = self._torch
        results: list[float] = []
        with torch.inference_mode():
            for start in range(0, len(prompt_ids), self.batch_size):
                chunk_p = prompt_ids[start : start + self.batch_size]
                chunk_c = continuations[start : start + self.batch_size]
                seqs = [p + c for p, c in zip(chunk_p, chunk_c)]
                keep = max(len(c) for c in chunk_c) + 1
                ids, mask, pos = self._left_pad(seqs)
                logits, _ = self._forward(ids, mask, pos, keep, past=False)
                for row, cont in enumerate(chunk_c):
                    m = len(cont)
                    rows = logits[row, keep - 1 - m : keep - 1]
                    logp = torch.log_softmax(rows, dim=-1)
                    target = torch.tensor(cont, device=logp.device)
                    results.append(float(logp.gather(1, target[:, None]).sum()))
        return results

    def _first_position_probs(self, prompt_ids: list[list[int]], ids: list[int]) -> list[dict[int, float]]:
        torch = self._torch
        out: list[dict[int, float]] = []
        with torch.inference_mode():
            for start in range(0, len(prompt_ids), self.batch_size):
                chunk = prompt_ids[start : start + self.batch_size]
                tensor_ids, mask, pos = self._left_pad(chunk)
                logits, _ = self._forward(tensor_ids, mask, pos, 1, past=False)
                last = logits[:, -1, :].double()  # a token far below another keeps a probability its group renormalises
                probs = torch.exp(last[:, ids] - torch.logsumexp(last, dim=-1, keepdim=True)).cpu().tolist()
                out.extend({i: p for i, p in zip(ids, row)} for row in probs)
        return out

    def _greedy(self, prompt_ids, max_new_tokens, first_seqs, stop, bans=None, *, samplers=None):
        bans = list(bans) if bans else [None] * len(prompt_ids)
        samplers = list(samplers) if samplers else [None] * len(prompt_ids)
        stops = stop_hooks(stop, len(prompt_ids))
        results = []
        for start in range(0, len(prompt_ids), self.batch_size):
            chunk = prompt_ids[start : start + self.batch_size]
            chunk_bans = bans[start : start + self.batch_size]
            chunk_samplers = samplers[start : start + self.batch_size]
            chunk_stops = stops[start : start + self.batch_size]
            results.extend(self._greedy_batch(chunk, max_new_tokens, first_seqs, chunk_stops, chunk_bans, chunk_samplers))
        return results

    def _guard_choices(self, last, nxt: list[int], generated, done, bans, samplers=None) -> list[int]:
        """Rows whose argmax is banned (see ``_greedy``): their argmax over the allowed ids.

        Rows with a sampler take a draw of it instead (the ban applied inside; rows where it changed
        the draw are returned too).
        """
        torch = self._torch
        changed = []
        for row, sampler in enumerate(samplers or ()):
            if done[row] or sampler is None:
                continue
            ban = bans[row](generated[row]) if bans[row] is not None else ()
            nxt[row], moved = sampler.choose(last[row].float().cpu().numpy(), ban)
            if moved:
                changed.append(row)
        for row, banned in enumerate(bans):
            if done[row] or banned is None or (samplers and samplers[row] is not None):
                continue
            ban = banned(generated[row])
            if nxt[row] in ban:
                masked = last[row].clone()
                masked[torch.tensor(sorted(ban), device=masked.device, dtype=torch.long)] = float("-inf")
                nxt[row] = int(masked.argmax())
                changed.append(row)
        return changed

    def _first_logprobs(self, last, past, mask, pos, first_seqs) -> list[list[float]]:
        """log p(seq | prompt) per row and candidate, from the prompt's next-position logits and
        (for multi-token candidates) one short forward on a copy of the prompt's KV cache."""
        torch = self._torch
        logp_first = torch.log_softmax(last, dim=-1)
        columns = []
        for seq in first_seqs:
            total = logp_first[:, seq[0]]
            if len(seq) > 1:
                batch, m = last.shape[0], len(seq) - 1
                feed = torch.tensor(seq[:-1], device=self.device).expand(batch, m)
                ext = torch.cat([mask, torch.ones((batch, m), dtype=mask.dtype, device=self.device)], dim=1)
                steps = pos[:, -1:] + torch.arange(1, m + 1, device=self.device)
                logits, _ = self._forward(feed, ext, steps, m, past=copy.deepcopy(past))
                target = torch.tensor(seq[1:], device=self.device).expand(batch, m)
                total = total + torch.log_softmax(logits, dim=-1).gather(2, target[..., None])[..., 0].sum(-1)
            columns.append(total)
        if not columns:
            return [[] for _ in range(last.shape[0])]
        return torch.stack(columns, dim=1).cpu().tolist()

    def _greedy_batch(self, prompt_ids, max_new_tokens, first_seqs, stop, bans, samplers=None):
        torch = self._torch
        batch = len(prompt_ids)
        stops = stop_hooks(stop, batch)
        watch = self._reflection_list
        watch_t = torch.tensor(watch, device=self.device, dtype=torch.long) if watch else None
        generated: list[list[int]] = [[] for _ in range(batch)]
        per_pos: list[list[dict[int, float]]] = [[] for _ in range(batch)]
        cum = [0.0] * batch
        guarded = [0] * batch
        done = [False] * batch
        with torch.inference_mode():
            ids, mask, pos = self._left_pad(prompt_ids)
            logits, past = self._forward(ids, mask, pos, 1)
            first = self._first_logprobs(logits[:, -1, :], past, mask, pos, first_seqs)
            for step in range(max_new_tokens):
                last = logits[:, -1, :]
                lse = torch.logsumexp(last, dim=-1)
                nxt_list = last.argmax(dim=-1).cpu().tolist()
                for row in self._guard_choices(last, nxt_list, generated, done, bans, samplers):
                    guarded[row] += 1
                nxt = torch.tensor(nxt_list, device=last.device)
                chosen = (last.gather(1, nxt[:, None])[:, 0] - lse).cpu().tolist()
                watched = torch.exp(last[:, watch_t] - lse[:, None]).cpu().tolist() if watch else [[]] * batch
                for row in range(batch):
                    if done[row]:
                        continue
                    tid = nxt_list[row]
                    generated[row].append(tid)
                    cum[row] += chosen[row]
                    group = self._groups.get(tid)
                    if group:
                        lookup = dict(zip(watch, watched[row]))
                        per_pos[row].append({i: lookup[i] for i in group})
                    else:
                        per_pos[row].append({})
                    if stops[row](generated[row]):
                        done[row] = True
                if all(done) or step == max_new_tokens - 1:
                    break
                feed = torch.tensor(
                    [self.pad_id if d else g[-1] for d, g in zip(done, generated)], device=self.device
                )[:, None]
                mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype, device=self.device)], dim=1)
                pos = pos[:, -1:] + 1
                logits, past = self._forward(feed, mask, pos, 1, past=past)
        return [(generated[r], cum[r], per_pos[r], first[r], guarded[r]) for r in range(batch)]
