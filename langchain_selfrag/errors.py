"""Typed errors of the Self-RAG graph, chain, retrieval and CLI.

Every failure a user can cause (bad input, an empty store, a failing retriever, a step budget
that is too small) raises a subclass of :class:`SelfRAGError` with a message that says what to do.
The CLI prints these messages without a traceback.
"""

from __future__ import annotations


class SelfRAGError(Exception):
    """Base class of every error raised on purpose by langchain-selfrag."""


class InvalidInputError(SelfRAGError, ValueError):
    """The chain input has the wrong type or shape."""


class EmptyQuestionError(InvalidInputError):
    """The question is empty or only whitespace."""


class QuestionTooLongError(InvalidInputError):
    """The question is longer than the configured maximum (``max_question_chars``)."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(
            f"question has {length} characters, more than the limit of {limit}; shorten it or raise "
            "max_question_chars"
        )
        self.length = length
        self.limit = limit


class QuestionExceedsContextError(QuestionTooLongError):
    """The question's prompt and its answer cannot fit the model's context, even without passages.

    Raised before any decoding; passages never cause it (they are cut to fit, see
    ``max_passage_tokens``).
    """

    def __init__(self, prompt_tokens: int, answer_tokens: int, context_length: int) -> None:
        InvalidInputError.__init__(
            self,
            f"the question's prompt has {prompt_tokens} tokens and its answer needs {answer_tokens} more "
            f"(max_new_tokens per segment plus reserved tokens): {prompt_tokens + answer_tokens} tokens, "
            f"more than the model's context of {context_length}; shorten the question, lower max_new_tokens "
            "or load the model with a larger context (n_ctx)",
        )
        self.length = self.prompt_tokens = prompt_tokens
        self.answer_tokens = answer_tokens
        self.limit = self.context_length = context_length


class StoreError(SelfRAGError):
    """A vector store could not be opened or written."""


class StoreTimeoutError(StoreError, TimeoutError):
    """A Chroma server did not answer within the client's timeout (``$SELFRAG_CHROMA_TIMEOUT``)."""


class EmptyStoreError(StoreError):
    """The vector store holds no documents (run ``selfrag index PATH`` first)."""


class NoDocumentsError(StoreError):
    """Indexing found no loadable files under the given path."""


class RetrieverError(SelfRAGError):
    """The retriever raised an exception; the original is chained as ``__cause__``."""


class RetrieverTimeoutError(RetrieverError, TimeoutError):
    """The retriever did not answer within ``retriever_timeout`` seconds."""


class StepBudgetExceededError(SelfRAGError):
    """The graph needed more steps than ``step_budget`` allows."""


class ModelLoadError(SelfRAGError):
    """No reflection LM could be loaded from the given path or id."""
