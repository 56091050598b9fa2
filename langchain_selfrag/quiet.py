"""Keep third-party noise (progress bars, deprecation warnings, llama.cpp's log) out of our output.

The CLI calls :func:`silence_third_party` unless ``--verbose`` is given; building the bundled model
runs inside :func:`quiet_build` so that only its own progress bar shows. Errors always get through.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import sys
import warnings
from collections.abc import Iterator
from typing import Any

#: ggml's log levels (ggml.h): the table in llama-cpp-python 0.3.36's ``_logger`` is an older enum
#: that maps WARN to ERROR, so ``Llama(verbose=False)`` still prints warnings.
GGML_LOG_ERROR = 4
GGML_LOG_CONT = 5

_llama_state: dict[str, Any] = {"verbose": False, "last": 0, "callback": None}


def _verbose() -> bool:
    """Ours, or llama-cpp-python's own switch (``Llama(verbose=True)`` sets its logger to DEBUG)."""
    theirs = logging.getLogger("llama-cpp-python").level
    return _llama_state["verbose"] or logging.NOTSET < theirs <= logging.DEBUG


def _on_llama_log(level: int, text: bytes, _user_data: Any) -> None:
    if level != GGML_LOG_CONT:
        _llama_state["last"] = level
    if _llama_state["last"] == GGML_LOG_ERROR or _verbose():
        print(text.decode("utf-8", "replace"), end="", flush=True, file=sys.stderr)


def quiet_llama_cpp(verbose: bool = False) -> None:
    """Route llama.cpp's log through our filter: errors only, everything with ``verbose``.

    Idempotent; a later call only changes the verbosity. Does nothing without llama_cpp.
    """
    _llama_state["verbose"] = verbose
    if _llama_state["callback"] is not None:
        return
    try:
        import llama_cpp
    except ImportError:
        return
    callback = llama_cpp.llama_log_callback(_on_llama_log)
    _llama_state["callback"] = callback  # kept alive: llama.cpp holds a raw pointer to it
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))


def silence_third_party() -> None:
    """Process-wide, for the CLI: no Hugging Face bars or info logs, no third-party deprecation
    warnings, llama.cpp errors only."""
    with contextlib.suppress(ImportError):
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        transformers_logging.set_verbosity_error()
    with contextlib.suppress(ImportError):
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    quiet_llama_cpp(verbose=False)


@contextlib.contextmanager
def quiet_build() -> Iterator[None]:
    """While our own bar reports a model build: no nested third-party bars or warnings."""
    restore: list[tuple[Any, str, Any]] = []
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
        from transformers.utils import logging as transformers_logging
    except ImportError:
        gguf_utils = transformers_logging = None
    bars_were_on = transformers_logging.is_progress_bar_enabled() if transformers_logging else False
    if gguf_utils is not None and hasattr(gguf_utils, "tqdm"):
        # The GGUF de-quantisation bar is plain tqdm, outside transformers' progress-bar switch.
        restore.append((gguf_utils, "tqdm", gguf_utils.tqdm))
        gguf_utils.tqdm = functools.partial(gguf_utils.tqdm, disable=True)
    if transformers_logging is not None:
        transformers_logging.disable_progress_bar()
    quiet_llama_cpp(verbose=_llama_state["verbose"])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        for owner, name, value in restore:
            setattr(owner, name, value)
        if bars_were_on and transformers_logging is not None:
            transformers_logging.enable_progress_bar()
