"""LibreTranslate's request and response shapes: the fields of `POST /translate` (form-encoded or JSON, `q` a string
or a list), the answers of `/translate`, `/languages` and `/frontend/settings`, and the error body
`{"error": "..."}` with its HTTP status. Messages follow LibreTranslate's wording where it has one.

One field is this server's own: `glossary`, the terms the translations must use, as a JSON object
`{"source term": "target term"}`, a list of `[source, target]` pairs, or (in a form) `source<TAB>target` lines.
LibreTranslate's clients do not send it, so they translate as ever.

One field of the answer is this server's own too: `quality`, where the model has a quality estimator, each text's
estimate `{"score", "words": [{"word", "probability", "ok"}], "bergamot"}` (and `"retranslated"` with a teacher),
a list for a list; LibreTranslate's clients ignore it. `/frontend/settings` lists the pairs that give it
(`qualityEstimates`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hf_bahdanau.decoding.glossary import Glossary
from hf_bahdanau.errors import InputError
from hf_bahdanau.languages import language_name

FORMATS = ("text", "html")
MAX_DEPTH = 32  # the deepest JSON body: LibreTranslate's fields nest 3 deep at most (a glossary's pairs in an object)
AUTO = "auto"  # LibreTranslate's "detect the source language"


class ApiError(Exception):
    """A request the server refuses: the HTTP status and the one-line message sent as `{"error": message}`."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


@dataclass(frozen=True)
class TranslateRequest:
    """`POST /translate`'s fields, checked: `texts` are `q`'s strings (`batch`: `q` was a list)."""

    texts: list[str]
    batch: bool
    source: str
    target: str
    format: str
    alternatives: int
    glossary: Glossary | None = None


def parse_json_fields(body: bytes) -> dict[str, Any]:
    """The fields of a JSON body: it must be an object, nested at most `MAX_DEPTH` deep (whatever the interpreter's
    recursion limit, which a library may have raised)."""
    if _depth(body) > MAX_DEPTH:
        raise ApiError(400, "Invalid JSON format: nested too deeply")
    try:
        fields = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ApiError(400, f"Invalid JSON format: {error}") from None
    if not isinstance(fields, dict):
        raise ApiError(400, "Invalid JSON format: expected an object of parameters")
    return fields


def _depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON `body` (brackets inside strings aside)."""
    brackets = re.sub(rb"[^\[\]{}]", b"", re.sub(rb'"(?:[^"\\]|\\.)*"', b"", body))
    depth = deepest = 0
    for byte in brackets:
        depth += 1 if byte in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def form_fields(items: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """The fields of a form: a name given once is its value, a name repeated (`q=a&q=b`) the list of its values."""
    fields: dict[str, Any] = {}
    for name, value in items:
        if not isinstance(value, str):
            raise ApiError(400, f"Invalid request: {name} must be text, not a file")
        if name in fields:
            previous = fields[name]
            fields[name] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            fields[name] = value
    return fields


def _text_field(fields: Mapping[str, Any], name: str) -> str:
    value = fields.get(name)
    if value is None or value == "":
        raise ApiError(400, f"Invalid request: missing {name} parameter")
    if not isinstance(value, str):
        raise ApiError(400, f"Invalid request: {name} must be a string")
    return value


def parse_translate(fields: Mapping[str, Any]) -> TranslateRequest:
    """`POST /translate`'s fields checked as LibreTranslate checks them (the languages are looked up after)."""
    q = fields.get("q")
    if q is None or q == "" or q == []:
        raise ApiError(400, "Invalid request: missing q parameter")
    batch = isinstance(q, list)
    texts = q if batch else [q]
    if not all(isinstance(text, str) for text in texts):
        raise ApiError(400, "Invalid request: q must be a string or a list of strings")
    source, target = _text_field(fields, "source"), _text_field(fields, "target")
    text_format = fields.get("format") or "text"
    if text_format not in FORMATS:
        raise ApiError(400, f"{text_format} format is not supported")
    alternatives = fields.get("alternatives") or 0
    try:
        if isinstance(alternatives, bool | float):
            raise ValueError
        alternatives = max(0, int(alternatives))
    except (TypeError, ValueError):
        raise ApiError(400, "Invalid request: alternatives parameter is not a number") from None
    return TranslateRequest(list(texts), batch, source, target, text_format, alternatives, parse_glossary(fields))


def parse_glossary(fields: Mapping[str, Any]) -> Glossary | None:
    """The request's `glossary` (see the module's docstring), or None where it has none."""
    given = fields.get("glossary")
    if given is None or given == "" or given == {} or given == []:
        return None
    if isinstance(given, list) and not all(isinstance(pair, list) and len(pair) == 2 for pair in given):
        raise ApiError(400, "Invalid request: glossary must be an object, [source, target] pairs or TSV lines")
    if not isinstance(given, str | dict | list):
        raise ApiError(400, "Invalid request: glossary must be an object, [source, target] pairs or TSV lines")
    try:
        if isinstance(given, str):  # TSV lines, read as a glossary file's (a header line, comments)
            return Glossary.from_lines(given.split("\n"), "glossary")
        return Glossary.from_pairs(given)
    except InputError as error:
        raise ApiError(400, f"Invalid request: {'' if isinstance(given, str) else 'glossary: '}{error}") from None


def translate_response(
    request: TranslateRequest,
    translations: Sequence[Sequence[str]],
    detected: str | None = None,
    qualities: Sequence[dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """`/translate`'s answer: each text's best translation, its distinct alternatives when asked for, the
    source language chosen for `source=auto` (confidence 0: chosen as the only candidate, not detected), and each
    text's quality estimate where the model makes them (`qualities`; None for a text with nothing estimated)."""
    best = [hypotheses[0] for hypotheses in translations]
    others = [_distinct(hypotheses[1:], hypotheses[0]) for hypotheses in translations]
    result: dict[str, Any] = {"translatedText": best if request.batch else best[0]}
    if request.alternatives:
        result["alternatives"] = others if request.batch else others[0]
    if detected is not None:
        language = {"confidence": 0.0, "language": detected}
        result["detectedLanguage"] = [language] * len(best) if request.batch else language
    if qualities is not None:
        result["quality"] = list(qualities) if request.batch else qualities[0]
    return result


def _distinct(texts: Sequence[str], best: str) -> list[str]:
    """`texts` without repeats, without `best` and without empty ones, in order (as LibreTranslate lists them)."""
    seen = {best, ""}
    kept = []
    for text in texts:
        if text not in seen:
            seen.add(text)
            kept.append(text)
    return kept


def languages_response(pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """`/languages`: every language of the served pairs with the targets it translates into ([] for a language
    served only as a target)."""
    codes = sorted({code for pair in pairs for code in pair})
    return [
        {"code": code, "name": language_name(code), "targets": sorted({t for s, t in pairs if s == code})}
        for code in codes
    ]


def frontend_settings(
    pairs: Sequence[tuple[str, str]],
    char_limit: int,
    keys: bool,
    timeout_ms: int,
    estimated: Mapping[tuple[str, str], float | None] | None = None,
) -> dict[str, Any]:
    """`/frontend/settings`: the character limit, whether keys are needed, a default language pair, and the pairs
    whose answers carry a `quality` field (`estimated`: pair -> the least estimate kept before the teacher
    re-translates, None without a teacher)."""
    source, target = sorted(pairs)[0]
    quality = [{"source": s, "target": t, "minQuality": least} for (s, t), least in sorted((estimated or {}).items())]
    return {
        "charLimit": char_limit,
        "frontendTimeout": timeout_ms,
        "apiKeys": keys,
        "keyRequired": keys,
        "suggestions": False,
        "filesTranslation": False,
        "supportedFilesFormat": [],
        "language": {
            "source": {"code": source, "name": language_name(source)},
            "target": {"code": target, "name": language_name(target)},
        },
        "qualityEstimates": quality,
    }


def error_body(message: str) -> dict[str, str]:
    return {"error": message}


__all__ = [
    "AUTO",
    "ApiError",
    "FORMATS",
    "TranslateRequest",
    "error_body",
    "form_fields",
    "frontend_settings",
    "language_name",
    "languages_response",
    "parse_json_fields",
    "parse_translate",
    "translate_response",
]
