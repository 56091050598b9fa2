"""The llama.cpp side of the llama.cpp backend: the binding it needs, the objects it owns, the C API calls.

:class:`NativeCalls` is mixed into :class:`~langchain_selfrag.lm.llamacpp.model.LlamaCppReflectionLM`:
its tokenizer and its low-level decoding (KV-cache sequences, ``llama_decode`` in ``n_batch``
chunks, logits rows), read through ``self._lib`` and ``self._native``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..protocol import ReflectionLMError
from .layout import Entry, common_prefix
from .prefix_states import PrefixStates, passage_prefix_length

#: Passages shorter than this are decoded again rather than restored (a state file costs more than they do).
MIN_PASSAGE_TOKENS = 32

#: The llama-cpp-python releases this module is tested with, [from, below): the C API it binds
#: (llama_memory_*, llama_batch_*, the context-parameter fields) changes between llama.cpp releases.
TESTED_BINDING = ((0, 3, 36), (0, 4, 0))


def check_binding_version(version: str) -> None:
    """Raise :class:`ReflectionLMError` unless ``version`` is in :data:`TESTED_BINDING`."""
    parts: list[int] = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    low, high = TESTED_BINDING
    if len(parts) < 3 or not low <= tuple(parts) < high:
        want = f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
        raise ReflectionLMError(
            f"llama-cpp-python {version} is untested with this backend; install llama-cpp-python{want}"
        )


def default_threads() -> int:
    """``$SELFRAG_THREADS``, else this process's physical cores less the other processes running now.

    llama.cpp's threads spin while they wait for each other, so using every core slows to a crawl
    when other processes compete for them (measured: about 10x on a shared 2-core machine), and a
    hyperthread adds little. On an idle machine every physical core is used: on two cores without
    hyperthreads, the 1.5B question model's ``selfrag ask`` took 27.5 s on both against 44 s on one.
    """
    env = os.environ.get("SELFRAG_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return threads_for(physical_cores(), running_elsewhere())


def threads_for(cores: int, busy: int) -> int:
    """The threads to run on ``cores`` physical cores while ``busy`` other processes run: at least one."""
    return max(1, cores - busy)


def physical_cores(cpuinfo: str | None = None, logical: int | None = None) -> int:
    """The physical cores this process may run on: its logical CPUs over the threads per core that
    ``/proc/cpuinfo`` reports (``siblings`` / ``cpu cores``); half the logical CPUs where it says nothing."""
    if logical is None:
        logical = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    fields = dict(re.findall(r"(?m)^(siblings|cpu cores)\s*:\s*(\d+)", cpuinfo))
    siblings, cores = int(fields.get("siblings", 0)), int(fields.get("cpu cores", 0))
    per_core = siblings // cores if siblings and cores and siblings >= cores else 2
    return max(1, logical // per_core)


def running_elsewhere(loadavg: str | None = None) -> int:
    """Processes running or ready to run now, this one left out (``/proc/loadavg``'s fourth field); 0
    where the system does not say."""
    if loadavg is None:
        try:
            loadavg = Path("/proc/loadavg").read_text(encoding="utf-8")
        except OSError:
            return 0
    match = re.search(r"\s(\d+)/\d+\s", loadavg)
    return max(0, int(match.group(1)) - 1) if match else 0


def set_fields(params: ctypes.Structure, options: dict[str, Any]) -> None:
    """Set the fields of a llama.cpp parameter struct named in ``options`` (removed from it)."""
    names = {name for name, _ in type(params)._fields_}
    for key in [k for k in options if k in names]:
        setattr(params, key, options.pop(key))


def binding_version() -> str:
    """The installed llama-cpp-python's version (saved KV states are kept apart by it)."""
    import llama_cpp

    return str(llama_cpp.__version__)


def open_binding(model_path: str | os.PathLike, verbose: bool) -> tuple[Any, Path]:
    """llama.cpp's C binding (a tested release) initialised, and ``model_path`` checked to be a file;
    llama.cpp's log goes to the ``llama-cpp-python`` logger (DEBUG when ``verbose``, else ERROR)."""
    try:
        import llama_cpp
        from llama_cpp import llama_cpp as lib
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ReflectionLMError("llama-cpp-python is not installed: pip install 'langchain-selfrag[llamacpp]'") from exc
    check_binding_version(llama_cpp.__version__)
    path = Path(model_path)
    if not path.is_file():
        raise ReflectionLMError(f"GGUF file not found: {path}")
    # llama-cpp-python routes llama.cpp's log through this logger (as Llama(verbose=...) does).
    logging.getLogger("llama-cpp-python").setLevel(logging.DEBUG if verbose else logging.ERROR)
    lib.llama_backend_init()
    return lib, path


def apply_options(model_params: ctypes.Structure, context_params: ctypes.Structure, options: dict[str, Any]) -> None:
    """Set the fields of llama.cpp's model and context parameters named in ``options``; TypeError for others."""
    options = dict(options)
    set_fields(model_params, options)
    set_fields(context_params, options)
    if options:
        raise TypeError(f"unknown llama.cpp options: {', '.join(sorted(options))}")


class NativeHandles:
    """The llama.cpp objects one LM owns: model, context and batch, freed once by :meth:`close`.

    Kept apart from the LM so that ``weakref.finalize`` can free them at interpreter exit (while
    the binding's module globals still exist) without keeping the LM alive.
    """

    def __init__(self, lib: Any, path: Path, model_params: Any, context_params: Any) -> None:
        self.lib = lib
        self.model = lib.llama_model_load_from_file(str(path).encode("utf-8"), model_params)
        self.ctx = self.batch = None
        if not self.model:
            raise ReflectionLMError(f"llama.cpp could not load {path}")
        self.ctx = lib.llama_init_from_model(self.model, context_params)
        if not self.ctx:
            self.close()
            raise ReflectionLMError(f"llama.cpp could not make a context for {path} (out of memory?)")
        self.n_batch = int(lib.llama_n_batch(self.ctx))
        self.n_seq = int(lib.llama_n_seq_max(self.ctx))
        self.batch = lib.llama_batch_init(self.n_batch, 0, self.n_seq)
        self.memory = lib.llama_get_memory(self.ctx)
        self.vocab = lib.llama_model_get_vocab(self.model)

    def close(self) -> None:
        lib = self.lib
        if self.batch is not None:
            lib.llama_batch_free(self.batch)
            self.batch = None
        if self.ctx:
            lib.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            lib.llama_model_free(self.model)
            self.model = None


class NativeCalls:
    """Tokenizer and low-level decoding through llama.cpp's C API (mixed into the LM).

    Reads ``_lib``, ``_handles``, ``n_vocab``, ``context_length`` and keeps ``_cached`` (the tokens
    sequence 0 holds), ``_kept`` (the prompts other sequences hold until the next call) and
    ``_last_logits`` of the LM.
    """

    _prefix_states: PrefixStates | None = None  # saved passage reads (LlamaCppReflectionLM.reuse_passage_reads)
    _prefix_marker: bytes | None = None

    @property
    def closed(self) -> bool:
        """The llama.cpp objects were freed (``close()``); the model cannot be called again."""
        return self._handles.model is None

    @property
    def _native(self) -> NativeHandles:
        """The llama.cpp handles; a clear error once they were freed, not a crash inside llama.cpp."""
        if self.closed:
            raise ReflectionLMError(f"{self.model_path} was closed: load it again to use it")
        return self._handles

    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        lib, data = self._lib, text.encode("utf-8")
        size = len(data) + 2
        while True:
            buf = (lib.llama_token * size)()
            n = lib.llama_tokenize(self._native.vocab, data, len(data), buf, size, add_bos, True)
            if n >= 0:
                return list(buf[:n])
            if -n <= size:
                raise ReflectionLMError(f"llama.cpp could not tokenize {text[:60]!r}")
            size = -n

    def _piece(self, tid: int) -> bytes:
        lib, size = self._lib, 32
        while True:
            buf = ctypes.create_string_buffer(size)
            n = lib.llama_token_to_piece(self._native.vocab, tid, buf, size, 0, True)
            if n >= 0:
                return buf.raw[:n]
            size = -n  # the buffer was too small: -n bytes are needed

    def decode(self, ids: Sequence[int]) -> str:
        out = b"".join(self._piece(int(t)) for t in ids)
        # As llama-cpp-python's detokenize: drop the space a leading BOS makes (Llama-1 style vocabularies).
        if ids and ids[0] == self._lib.llama_vocab_bos(self._native.vocab) and out[:1] == b" ":
            out = out[1:]
        return out.decode("utf-8", errors="replace")

    def _eos_ids(self) -> Sequence[int]:
        is_eog, vocab = self._lib.llama_vocab_is_eog, self._native.vocab
        return [i for i in range(self.n_vocab) if is_eog(vocab, i)]

    def _special_ids(self) -> Sequence[int]:
        is_control, vocab = self._lib.llama_vocab_is_control, self._native.vocab
        return [i for i in range(self.n_vocab) if is_control(vocab, i)]

    # -- low-level decoding ---------------------------------------------------------------------
    def _overflow(self, needed: int) -> ReflectionLMError:
        return ReflectionLMError(
            f"context overflow: {needed} tokens exceed n_ctx={self.context_length}; "
            "shorten the passages or load the model with a larger n_ctx"
        )

    def _check_room(self, needed: int) -> None:
        if needed > self.context_length:
            raise self._overflow(needed)

    def _seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> None:
        self._lib.llama_memory_seq_rm(self._native.memory, seq, p0, p1)

    def _seq_cp(self, src: int, dst: int, p1: int) -> None:
        self._lib.llama_memory_seq_cp(self._native.memory, src, dst, 0, p1)

    def _seq_state(self, seq: int) -> bytes:
        """The KV cells of sequence ``seq`` (their positions and keys and values), as llama.cpp saves them."""
        lib, ctx = self._lib, self._native.ctx
        size = int(lib.llama_state_seq_get_size(ctx, seq))
        buf = (ctypes.c_uint8 * size)()
        written = int(lib.llama_state_seq_get_data(ctx, buf, size, seq))
        return bytes(memoryview(buf)[:written])

    def _set_seq_state(self, seq: int, data: bytes) -> bool:
        """Load cells saved by :meth:`_seq_state` into the empty sequence ``seq``; False when llama.cpp
        refuses them (another model's, or no room), the sequence then left empty."""
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if int(self._lib.llama_state_seq_set_data(self._native.ctx, buf, len(data), seq)) > 0:
            return True
        self._seq_rm(seq)
        return False

    # -- passages read once (.prefix_states) ----------------------------------------------------
    def _passage_prefix(self, ids: Sequence[int]) -> int | None:
        """The length of the passage that starts ``ids`` (the tokens before its last marker), or None."""
        if self._prefix_marker is None:
            return None
        pieces = self.__dict__.setdefault("_pieces", {})
        spelled = [pieces[t] if t in pieces else pieces.setdefault(t, self._piece(t)) for t in ids]
        return passage_prefix_length(spelled, self._prefix_marker, MIN_PASSAGE_TOKENS)

    def _read_passages(self, prompts: Sequence[Sequence[int]], shared: int, branches: Sequence[Sequence[int]],
                       spare: int) -> tuple[list[int], dict[int, int]]:
        """Restore the saved passages of prompts about to be decoded together (sequence i holds prompt i,
        ``branches[i]`` its candidates' sequences, the first ``shared`` cells already theirs).

        Returns where each prompt's decoding starts (``shared``; its passage's length when restored,
        the restored cells replacing the shared ones; 0 when llama.cpp refused them) and, by prompt,
        the passages to save once decoded. A restore repeats the shared cells, so it needs ``spare`` cells.
        """
        starts, to_save = [shared] * len(prompts), {}
        states = self._prefix_states
        if states is None:
            return starts, to_save
        for i, ids in enumerate(prompts):
            n = self._passage_prefix(ids)
            if n is None or n <= shared:
                continue
            data = states.get(ids[:n]) if spare >= shared else None
            if data is None:
                to_save[i] = n
                continue
            restored = self._restore(i, branches[i], data, n)
            starts[i] = n if restored else 0
            spare -= shared if restored else 0
        return starts, to_save

    def _restore(self, seq: int, copies: Sequence[int], data: bytes, n: int) -> bool:
        """Empty ``seq`` and ``copies``, load ``data`` (a passage of ``n`` tokens) into ``seq`` and share its
        cells with ``copies``; False, all of them left empty, when llama.cpp refuses it or it is not ``n`` long."""
        for s in (seq, *copies):
            self._seq_rm(s)
        restored = self._set_seq_state(seq, data)
        if restored and int(self._lib.llama_memory_seq_pos_max(self._native.memory, seq)) != n - 1:
            self._seq_rm(seq)  # not the passage it was saved as
            return False
        for s in copies if restored else ():
            self._seq_cp(seq, s, n)
        return restored

    def _read_passage(self, ids: Sequence[int], common: int, seqs: Sequence[int]) -> tuple[int, int | None]:
        """For one prompt on sequence 0 (shared with ``seqs``), ``common`` cells of it cached: restore its
        saved passage when that reaches further. Returns the cells now cached and, when the passage is not
        saved yet, its length (to save once decoded)."""
        n = self._passage_prefix(ids) if self._prefix_states is not None else None
        if n is None or n <= common or n >= len(ids):
            return common, None
        data = self._prefix_states.get(ids[:n])
        if data is None:
            return common, n
        restored = self._restore(0, seqs, data, n)
        self._cached = list(ids[:n]) if restored else []
        self._last_logits = None
        return (n if restored else 0), None

    def _save_passage(self, ids: Sequence[int], seq: int) -> None:
        """Save the cells of sequence ``seq``, which holds ``ids`` exactly."""
        if self._prefix_states is not None:
            self._prefix_states.put(ids, self._seq_state(seq))

    def _forget_cache(self) -> None:
        """Empty the KV cache (after a failed decode, whose cells are in an unknown state)."""
        self._lib.llama_memory_clear(self._native.memory, True)
        self._cached = []
        self._kept = {}
        self._last_logits = None

    def _logits_row(self, index: int) -> np.ndarray:
        ptr = self._lib.llama_get_logits_ith(self._native.ctx, index)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def _decode_entries(self, entries: Sequence[Entry]) -> dict[int, np.ndarray]:
        """Decode (token, position, sequence ids, wants logits) entries, ``n_batch`` per ``llama_decode``.

        Returns the logits of the entries that asked for them, by entry index.
        """
        native, lib = self._native, self._lib
        batch = native.batch
        rows: dict[int, np.ndarray] = {}
        for start in range(0, len(entries), native.n_batch):
            chunk = entries[start : start + native.n_batch]
            batch.n_tokens = len(chunk)
            for j, (token, pos, seqs, wants) in enumerate(chunk):
                batch.token[j] = token
                batch.pos[j] = pos
                batch.n_seq_id[j] = len(seqs)
                for k, seq in enumerate(seqs):
                    batch.seq_id[j][k] = seq
                batch.logits[j] = wants
            code = lib.llama_decode(native.ctx, batch)
            if code != 0:
                self._forget_cache()
                if code == 1:
                    raise ReflectionLMError(
                        f"context overflow: llama.cpp found no KV cells for {len(chunk)} tokens (n_ctx="
                        f"{self.context_length}); shorten the passages or load the model with a larger n_ctx"
                    )
                raise ReflectionLMError(f"llama_decode failed with code {code}")
            rows.update((start + j, self._logits_row(j)) for j, e in enumerate(chunk) if e[3])
        return rows

    def _decode(self, tokens: Sequence[int]) -> np.ndarray:
        """Append ``tokens`` to sequence 0; the logits of the last position."""
        self._check_room(len(self._cached) + len(tokens))
        n = len(self._cached)
        entries = [(tok, n + j, (0,), j == len(tokens) - 1) for j, tok in enumerate(tokens)]
        rows = self._decode_entries(entries)
        self._cached += list(tokens)
        return rows[len(entries) - 1]

    def _reuse_prefix(self, ids: Sequence[int], upto: int, seqs: Sequence[int]) -> int:
        """Keep the cached cells of ``ids[:upto]`` on sequence 0, shared with ``seqs``; their count.

        A prompt the last batched scoring kept on a sequence of its own (:attr:`_kept`) is the cache
        when it shares more of ``ids`` than sequence 0 does: its cells move to sequence 0 (a question's
        answer request reuses the prefill of its passage's IsRel question). The kept sequences then
        leave the cache, and so does sequence 0 beyond the common prefix.
        """
        common = min(common_prefix(self._cached, ids), upto)
        kept = getattr(self, "_kept", None) or {}
        source = max(kept, key=lambda seq: common_prefix(kept[seq], ids), default=None)
        if source is not None and min(common_prefix(kept[source], ids), upto) > common:
            common = min(common_prefix(kept[source], ids), upto)
            self._seq_rm(0)
            self._seq_cp(source, 0, common)
            self._cached = list(kept[source][:common])
        for seq in kept:
            self._seq_rm(seq)
        self._kept = {}
        self._seq_rm(0, common, -1)
        del self._cached[common:]
        for seq in seqs:
            if seq and common:
                self._seq_cp(0, seq, common)
        return common
