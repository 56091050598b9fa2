"""JSON over HTTP for the remote backend: timeouts, retries with backoff, clear errors."""

from __future__ import annotations

import time
from typing import Any

from ..protocol import ReflectionLMError


class ServerRejected(ReflectionLMError):
    """The server answered a request with a client error (4xx) or refused a feature."""


class HttpClient:
    """JSON over httpx with timeouts, retries with exponential backoff and clear errors."""

    def __init__(self, root: str, timeout: float, max_retries: int, backoff: float, api_key: str | None) -> None:
        try:
            import httpx
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ReflectionLMError("httpx is not installed: pip install 'langchain-selfrag[server]'") from exc
        self._httpx = httpx
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.root = root
        self.client = httpx.Client(
            base_url=root, headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0))
        )
        self.max_retries = max_retries
        self.backoff = backoff

    def request(self, method: str, path: str, body: dict | None = None, *, retries: int | None = None) -> Any:
        httpx = self._httpx
        attempts = 1 + (self.max_retries if retries is None else retries)
        last = ""
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                resp = self.client.request(method, path, json=body)
            except (httpx.TransportError, OSError) as exc:
                last = f"cannot reach {self.root}{path}: {type(exc).__name__}: {exc}"
                continue
            if resp.status_code >= 500:
                last = f"{self.root}{path} answered HTTP {resp.status_code}: {resp.text[:300]}"
                continue
            if resp.status_code >= 400:
                raise ServerRejected(f"{self.root}{path} rejected the request (HTTP {resp.status_code}): {resp.text[:300]}")
            try:
                return resp.json()
            except ValueError as exc:
                raise ReflectionLMError(f"malformed response from {self.root}{path}: not JSON: {resp.text[:200]!r}") from exc
        raise ReflectionLMError(f"{last} (after {attempts} attempt{'s' if attempts > 1 else ''})")

    def close(self) -> None:
        self.client.close()


def response_field(obj: Any, *keys: Any) -> Any:
    """``obj[k1][k2]...`` or a ReflectionLMError naming the missing field."""
    for key in keys:
        try:
            obj = obj[key]
        except (KeyError, IndexError, TypeError):
            raise ReflectionLMError(f"malformed response: missing field {'.'.join(map(str, keys))}") from None
    return obj
