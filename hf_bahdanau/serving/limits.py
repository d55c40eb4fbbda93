"""What one request may ask for (characters, sentences, glossary terms; body bytes and time: `BodyLimit`) and the
optional API keys.

Keys come from a file, one a line (blank lines and `#` comments left out). A key given with a request is compared
with every key in constant time (`hmac.compare_digest` of SHA-256 digests), so the time taken tells nothing of how
much of it matched; keys are never logged, and a problem with the file is reported by line number only.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse

from hf_bahdanau.errors import InputError

from .shapes import ApiError, error_body

if TYPE_CHECKING:
    from hf_bahdanau.decoding.glossary import Glossary

MISSING_KEY = "Please contact the server operator to get an API key"


@dataclass(frozen=True)
class Limits:
    """`chars`: characters of one request (all its texts and glossary terms); `sentences`: sentences of one request
    once split; `queue`: sentences waiting for a model before requests are refused (429); `body_bytes`: the request
    body; `glossary_terms`, `term_chars`: terms of a request's glossary, and characters of each side of a term (a
    target term lengthens the translations that must hold it); `read_seconds`: the time a client has to send a
    request's headers, and then its body; `connections`: connections served at once (`connections.py`)."""

    chars: int = 5000
    sentences: int = 200
    queue: int = 2000
    body_bytes: int = 1 << 20
    glossary_terms: int = 10
    term_chars: int = 48
    read_seconds: float = 20.0
    connections: int = 256

    def __post_init__(self) -> None:
        if self.queue < self.sentences:
            raise InputError(
                f"the queue limit ({self.queue}) is below the sentence limit ({self.sentences}): a request of "
                f"{self.sentences} sentences could never be translated"
            )

    def check_glossary_field(self, given: object) -> None:
        """A `glossary` field of more terms than `glossary_terms` (entries, or lines less comments and a header) is
        refused before it is read."""
        if isinstance(given, str):
            lines = [line for line in given.split("\n") if line.strip() and not line.lstrip().startswith("#")]
            count = len(lines) - 1 if len(lines) > self.glossary_terms else len(lines)  # the first a header, maybe
        else:
            count = len(given) if isinstance(given, dict | list) else 0
        if count > self.glossary_terms:
            raise ApiError(
                400, f"Invalid request: glossary ({count} terms) exceeds glossary limit ({self.glossary_terms})"
            )

    def check_chars(self, texts: list[str], glossary: Glossary | None = None) -> None:
        """The texts' and the glossary's characters together within `chars`, each side of a term within
        `term_chars`."""
        terms = glossary.terms if glossary is not None else ()
        longest = max((len(side) for term in terms for side in (term.source, term.target)), default=0)
        if longest > self.term_chars:
            raise ApiError(400, f"Invalid request: a glossary term ({longest}) exceeds term limit ({self.term_chars})")
        size = sum(len(text) for text in texts) + sum(len(term.source) + len(term.target) for term in terms)
        if size > self.chars:
            raise ApiError(400, f"Invalid request: request ({size}) exceeds text limit ({self.chars})")

    def check_texts(self, count: int) -> None:
        """Each text is a sentence at least: more texts than the sentence limit are refused before any is split."""
        if count > self.sentences:
            raise ApiError(400, f"Invalid request: request ({count} texts) exceeds sentence limit ({self.sentences})")

    def check_sentences(self, count: int) -> None:
        if count > self.sentences:
            raise ApiError(
                400, f"Invalid request: request ({count} sentences) exceeds sentence limit ({self.sentences})"
            )


class ApiKeys:
    """The keys a request must carry one of (`api_key`); no file: none needed."""

    def __init__(self, digests: list[bytes]) -> None:
        self._digests = digests

    @classmethod
    def from_file(cls, path: str | Path | None) -> ApiKeys:
        """The keys of a file (an InputError naming the file and line of a key with spaces inside)."""
        if path is None:
            return cls([])
        digests = []
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as error:
            raise InputError(f"the API key file {path} cannot be read ({error.strerror or error})") from None
        except UnicodeDecodeError as error:
            raise InputError(f"the API key file {path} is not UTF-8 text (byte {error.start})") from None
        for number, line in enumerate(lines, 1):
            key = line.strip()
            if not key or key.startswith("#"):
                continue
            if any(character.isspace() for character in key):
                raise InputError(f"{path} line {number}: an API key has no spaces inside (one key a line)")
            digests.append(_digest(key))
        if not digests:
            raise InputError(f"{path} holds no API key (one key a line)")
        return cls(digests)

    @property
    def required(self) -> bool:
        return bool(self._digests)

    def check(self, key: object) -> None:
        """Refuse a request without a key (400, as LibreTranslate) or with a key not in the file (403)."""
        if not self._digests:
            return
        if key is None or key == "":
            raise ApiError(400, MISSING_KEY)
        if not isinstance(key, str):
            raise ApiError(403, "Invalid API key")
        given = _digest(key)
        found = False
        for digest in self._digests:  # every key compared: the time does not depend on which one matched
            found |= hmac.compare_digest(digest, given)
        if not found:
            raise ApiError(403, "Invalid API key")


class BodyLimit:
    """ASGI middleware refusing a request body over `limit` bytes with 413, by its Content-Length at once, or
    while it is read (a chunked body): nothing larger is ever held in memory. A body not all come `seconds` after
    the headers is refused with 408 (and the connection closed)."""

    def __init__(self, app: Any, limit: int, seconds: float) -> None:
        self.app, self.limit, self.seconds = app, limit, seconds

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self.limit:
            message = f"Invalid request: the body ({length.decode('latin-1')} bytes) exceeds {self.limit} bytes"
            response = JSONResponse(error_body(message), status_code=413 if length.isdigit() else 400)
            await response(scope, receive, send)
            return
        received = 0
        deadline = time.monotonic() + self.seconds
        complete = False

        async def limited() -> dict:
            nonlocal received, complete
            if complete:  # only a disconnect can come
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise ApiError(
                    408, f"Invalid request: the body did not come within {self.seconds:g} s", {"Connection": "close"}
                ) from None
            complete = not message.get("more_body", False)
            received += len(message.get("body", b""))
            if received > self.limit:
                raise ApiError(413, f"Invalid request: the body exceeds {self.limit} bytes")
            return message

        await self.app(scope, limited, send)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()  # any string, a lone surrogate too


__all__ = ["ApiKeys", "BodyLimit", "Limits", "MISSING_KEY"]
