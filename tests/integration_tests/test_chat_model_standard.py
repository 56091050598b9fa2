"""ChatSelfRAG under langchain-tests' ``ChatModelIntegrationTests``, on the bundled model (llama.cpp).

What a Self-RAG reflection model does not do is turned off below, each with its reason; the suite
then skips those tests with the reason it gives (e.g. "Test requires tool calling."):

* tool calling, tool choice, structured output, JSON mode: the model writes answer text with
  reflection tokens; it was never trained to emit tool calls or JSON, and the graph has no way to
  bind tools or a schema;
* image, PDF, audio, Anthropic-style inputs: the model reads text only;
* a per-call model override: one chain holds one loaded model (load another with ``model=``);
* ``test_stream_time``: needs VCR cassettes, which are for HTTP APIs (this model runs in-process).
"""

from __future__ import annotations

import pytest
from langchain_tests.integration_tests import ChatModelIntegrationTests

from langchain_selfrag.chat_models import ChatSelfRAG

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True, scope="module")
def _bundled(bundled_gguf, monkeypatch_module):
    """The chat model's default model is the bundled one: built here first, named explicitly."""
    monkeypatch_module.setenv("SELFRAG_MODEL", str(bundled_gguf))


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


class TestChatSelfRAGIntegration(ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[ChatSelfRAG]:
        return ChatSelfRAG

    @property
    def chat_model_params(self) -> dict:
        # No retriever: the model answers from what it knows; 24 tokens per segment keep it quick.
        return {"max_tokens": 24}

    @property
    def has_tool_calling(self) -> bool:
        return False

    @property
    def has_tool_choice(self) -> bool:
        return False

    @property
    def has_structured_output(self) -> bool:
        return False

    @property
    def supports_json_mode(self) -> bool:
        return False

    @property
    def supports_image_inputs(self) -> bool:
        return False

    @property
    def supports_image_urls(self) -> bool:
        return False

    @property
    def supports_pdf_inputs(self) -> bool:
        return False

    @property
    def supports_audio_inputs(self) -> bool:
        return False

    @property
    def supports_anthropic_inputs(self) -> bool:
        return False

    @property
    def supports_model_override(self) -> bool:
        return False

    @property
    def returns_usage_metadata(self) -> bool:
        return True
