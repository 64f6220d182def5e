"""Test doubles for the action tests, each at the SDK's own seam: an azure-core HttpTransport that
answers with canned responses and records every request, GCP REST responses for the client's
session, and a token credential that never leaves the process."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import requests
from azure.core.credentials import AccessToken
from azure.core.exceptions import HttpResponseError
from azure.core.pipeline.transport import HttpTransport
from azure.core.rest import HttpRequest, HttpResponse
from azure.core.utils import CaseInsensitiveDict

from validation.actions import NodeIds, RejectedNode


def node(name: str, *reasons: str, **ids: str) -> RejectedNode:
    return RejectedNode(
        name=name, reasons=tuple(reasons) or (f"{name}: gemm below floor",), ids=NodeIds(**ids)
    )


# --- Azure -----------------------------------------------------------------------------------


class TokenCredential:
    """A TokenCredential for tests: a fixed token, no identity service."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("test-token", int(time.time()) + 3600)


class CannedResponse(HttpResponse):
    def __init__(self, request: HttpRequest, status: int, headers: dict[str, str], body: Any) -> None:
        self._request = request
        self._status = status
        self._headers = CaseInsensitiveDict({"Content-Type": "application/json", **headers})
        self._content = b"" if body is None else json.dumps(body).encode()

    @property
    def request(self) -> HttpRequest:
        return self._request

    @property
    def status_code(self) -> int:
        return self._status

    @property
    def headers(self) -> Any:
        return self._headers

    @property
    def reason(self) -> str:
        return "OK" if self._status < 400 else "Error"

    @property
    def content_type(self) -> str | None:
        return self._headers.get("Content-Type")

    @property
    def is_closed(self) -> bool:
        return True

    @property
    def is_stream_consumed(self) -> bool:
        return True

    @property
    def encoding(self) -> str | None:
        return "utf-8"

    @encoding.setter
    def encoding(self, value: str | None) -> None:
        pass

    @property
    def url(self) -> str:
        return self._request.url

    @property
    def content(self) -> bytes:
        return self._content

    def text(self, encoding: str | None = None) -> str:
        return self._content.decode()

    def json(self) -> Any:
        return json.loads(self._content)

    def raise_for_status(self) -> None:
        if self._status >= 400:
            raise HttpResponseError(response=self)

    def read(self) -> bytes:
        return self._content

    def iter_raw(self, **kwargs: Any) -> Iterator[bytes]:
        yield self._content

    def iter_bytes(self, **kwargs: Any) -> Iterator[bytes]:
        yield self._content

    def close(self) -> None:
        pass

    def __enter__(self) -> CannedResponse:
        return self

    def __exit__(self, *args: object) -> None:
        pass


Responder = Callable[[HttpRequest], tuple[int, dict[str, str], Any]]


class CannedTransport(HttpTransport):
    """Answers every request through `responder` and keeps (method, url, JSON body) of each."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.sent: list[tuple[str, str, Any]] = []

    def send(self, request: HttpRequest, **kwargs: Any) -> CannedResponse:  # type: ignore[override]
        body = json.loads(request.content) if request.content else None
        self.sent.append((request.method, request.url, body))
        status, headers, payload = self.responder(request)
        return CannedResponse(request, status, headers, payload)

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __exit__(self, *args: object) -> None:
        pass


# --- GCP -------------------------------------------------------------------------------------


def gcp_response(status: int, body: Any, url: str = "https://compute.googleapis.com/") -> requests.Response:
    """What the compute client's REST session hands back (the SDK's own unit tests build these)."""
    response = requests.Response()
    response.status_code = status
    response._content = json.dumps(body).encode()
    response.headers["Content-Type"] = "application/json"
    response.request = requests.Request("POST", url).prepare()
    return response
