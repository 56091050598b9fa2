"""What a judge of biography claims is: ``judge(entity, claims, passages) -> list[bool | None]``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from langchain_core.documents import Document


@runtime_checkable
class Judge(Protocol):
    """Labels claims about an entity against its passages."""

    name: str

    def __call__(self, entity: str, claims: Sequence[str], passages: Sequence[Document]) -> list[bool | None]:
        """One label per claim: True, False, or None when it cannot be judged."""
        ...


def describe(judge: Any) -> str:
    """A one-line description of a judge for the report."""
    text = getattr(judge, "description", None)
    return str(text) if text else str(getattr(judge, "name", type(judge).__name__))
