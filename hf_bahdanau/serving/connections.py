"""How the server holds its connections: uvicorn's settings (`server_options`), and a deadline for a request's
headers that uvicorn does not have.

A client has `Limits.read_seconds` to send a request's headers, from connecting or from the previous response
(`HeaderDeadline`: the connection is closed), then as long again for its body (`limits.BodyLimit`: 408). An idle
kept-alive connection closes after `KEEP_ALIVE_SECONDS`; headers are at most `HEADER_BYTES`; beyond
`Limits.connections` connections at once, a request is answered 503 by uvicorn. The protocol is uvicorn's h11
implementation (pure Python), with or without httptools installed.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.h11_impl import H11Protocol

if TYPE_CHECKING:  # a `--workers` process unpickles `HeaderDeadline` before it answers its parent: imports stay light
    from .limits import Limits

KEEP_ALIVE_SECONDS = 5
HEADER_BYTES = 16 * 1024


class HeaderDeadline(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, closing a connection whose next request's headers have not all come within
    `header_seconds`."""

    def __init__(self, *args: Any, header_seconds: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_seconds = header_seconds

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._expect_headers(None)

    def on_response_complete(self) -> None:
        finished = self.cycle  # a pipelined request may start inside
        super().on_response_complete()
        self._expect_headers(finished)

    def _expect_headers(self, last: Any) -> None:
        self.loop.call_later(self.header_seconds, self._expire, last)

    def _expire(self, last: Any) -> None:
        if self.cycle is last and not self.transport.is_closing():  # no request has begun since
            self.transport.close()


def server_options(limits: Limits) -> dict[str, Any]:
    """uvicorn's settings (`uvicorn.run`, `uvicorn.Config`) for a server under `limits`."""
    return dict(
        http=functools.partial(HeaderDeadline, header_seconds=limits.read_seconds),
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        limit_concurrency=limits.connections,
        h11_max_incomplete_event_size=HEADER_BYTES,
    )


__all__ = ["HEADER_BYTES", "HeaderDeadline", "KEEP_ALIVE_SECONDS", "server_options"]
