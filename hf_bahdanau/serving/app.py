"""The routes: LibreTranslate's `POST /translate`, `GET /languages`, `POST /detect`, `GET /frontend/settings`, and
`GET /health`. Every refusal is LibreTranslate's `{"error": "..."}` with its status; an unexpected failure is a 500
of the same shape (its traceback in the server's log), and the server goes on serving.

A text is split into sentences as `translate --document` splits a document (paragraphs at blank lines, sentences by
`sentencex` in the model's source language; HTML: by `decoding.markup`, its inline tags put back on the aligned
words of the translation), the sentences go through the model's
`Lanes` (a `Batcher` for requests with a glossary, another for the rest), and the translations are put back
together. Alternative k of a text is each sentence's k-th best translation put together the same way. The server
keeps no state between requests: replicas can share any load balancer.

A model with a quality estimator estimates each sentence; a text's estimate (`quality` in the answer) is its
sentences' put together (`joined_estimate`), with how many of them its teacher re-translated where it has one.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from hf_bahdanau.decoding.documents import grouped, join_document, split_document
from hf_bahdanau.decoding.glossary import Glossary
from hf_bahdanau.decoding.markup.html import HtmlDocument
from hf_bahdanau.decoding.quality.estimator import joined_estimate
from hf_bahdanau.errors import InputError

from .batching import Lanes
from .limits import ApiKeys, BodyLimit, Limits
from .model import Decoding, Sentence, ServedModel, Teacher
from .shapes import (
    AUTO,
    ApiError,
    TranslateRequest,
    error_body,
    form_fields,
    frontend_settings,
    language_name,
    languages_response,
    parse_json_fields,
    parse_translate,
    translate_response,
)

logger = logging.getLogger("hf_bahdanau.serving")
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
FRONTEND_TIMEOUT_MS = 500
CLOSE_SECONDS = 1.0  # how long stopping waits for a model's batch in progress


@dataclass(frozen=True)
class Batching:
    """`wait`: the pause in arrivals after which a batch starts; `batch_tokens`, `batch_size`: its padded size
    and sentences at most (`batching.Batcher`)."""

    wait: float = 0.02
    batch_tokens: int = 4096
    batch_size: int = 64


@dataclass(frozen=True)
class Settings:
    """Everything a server process needs (what `serve`'s options say)."""

    models: tuple[str, ...]
    decoding: Decoding = field(default_factory=Decoding)
    batching: Batching = field(default_factory=Batching)
    limits: Limits = field(default_factory=Limits)
    api_keys: str | None = None
    fallbacks: tuple[str, ...] = ()  # teacher folders, each of the model of its language pair


def load_models(settings: Settings) -> dict[tuple[str, str], ServedModel]:
    """The served models by language pair, each with the teacher of its pair where `fallbacks` has one (an
    InputError for two models or two teachers of one pair, and for a teacher of a pair no model serves)."""
    teachers: dict[tuple, Teacher] = {}
    for folder in settings.fallbacks:
        teacher = Teacher.load(folder, settings.decoding)
        if teacher.pair in teachers:
            raise InputError(f"--fallback {teachers[teacher.pair].folder} and {folder} both translate "
                             f"{'->'.join(map(str, teacher.pair))}")  # fmt: skip
        teachers[teacher.pair] = teacher
    models: dict[tuple[str, str], ServedModel] = {}
    for folder in settings.models:
        model = ServedModel(folder, settings.decoding, list(teachers.values()))
        if model.pair in models:
            raise InputError(f"{models[model.pair].folder} and {folder} both translate {'->'.join(model.pair)}")
        models[model.pair] = model
    for pair, teacher in teachers.items():
        if pair not in models:
            raise InputError(f"--fallback {teacher.folder} translates {'->'.join(map(str, pair))}: no --model "
                             "translates that pair")  # fmt: skip
    return models


def build_app(settings: Settings, models: dict[tuple[str, str], ServedModel] | None = None) -> FastAPI:
    """The server's app for `settings` (its models loaded here unless given)."""
    models = models if models is not None else load_models(settings)
    keys = ApiKeys.from_file(settings.api_keys)
    limits = settings.limits
    batching = settings.batching
    lanes = {
        pair: Lanes(
            model.translate,
            model.count_tokens,
            wait=batching.wait,
            batch_tokens=batching.batch_tokens,
            batch_size=batching.batch_size,
            queue_limit=limits.queue,
            name="-".join(pair),
        )
        for pair, model in models.items()
    }
    pairs = sorted(models)
    worker = secrets.token_hex(4)  # names this process in /health (one of `--workers`)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for lane in lanes.values():
            lane.start()
        logger.info("serving %s", ", ".join(f"{s}->{t} ({models[s, t].folder})" for s, t in pairs))
        yield  # uvicorn has waited `--shutdown-timeout` for requests in flight: a batch still running is left
        await asyncio.to_thread(lambda: [lane.close(CLOSE_SECONDS) for lane in lanes.values()])

    app = FastAPI(title="hf-bahdanau serve (LibreTranslate API)", lifespan=lifespan)
    app.add_middleware(BodyLimit, limit=limits.body_bytes, seconds=limits.read_seconds)
    app.middleware("http")(_access_log)
    app.add_middleware(ShutdownAnswer)  # the outermost: whatever a cancellation interrupts inside

    @app.exception_handler(ApiError)
    async def refused(request: Request, error: ApiError) -> JSONResponse:
        return JSONResponse(error_body(error.message), status_code=error.status, headers=error.headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        return JSONResponse(error_body(str(error.detail)), status_code=error.status_code)

    @app.exception_handler(Exception)
    async def failed(request: Request, error: Exception) -> JSONResponse:
        logger.error("%s %s failed", request.method, request.url.path, exc_info=error)
        return JSONResponse(error_body(f"Cannot translate text: {type(error).__name__}"), status_code=500)

    @app.post("/translate")
    async def translate(request: Request) -> JSONResponse:
        """Translate `q` (a string or a list) from `source` to `target` (LibreTranslate's fields)."""
        fields = await _read_fields(request)
        keys.check(fields.get("api_key"))
        _refuse_lone_surrogates(fields)
        limits.check_glossary_field(fields.get("glossary"))  # before its terms are read
        parsed = parse_translate(fields)
        limits.check_texts(len(parsed.texts))  # before any work a text costs
        pair, detected = _pick(parsed, pairs)
        model = models[pair]
        if parsed.alternatives > model.max_alternatives:
            raise ApiError(400, f"Invalid request: alternatives parameter must be <= {model.max_alternatives}")
        if parsed.glossary is not None and model.glossary_refusal is not None:
            raise ApiError(400, f"Invalid request: {model.glossary_refusal}")
        limits.check_chars(parsed.texts, parsed.glossary)
        plans = [_plan(text, parsed.format, pair[0]) for text in parsed.texts]
        sentences = [sentence for plan, _ in plans for sentence in plan]
        limits.check_sentences(len(sentences))
        found = await _translated(request, lanes[pair], sentences, parsed.alternatives + 1, parsed.glossary,
                                  aligned=parsed.format == "html")  # fmt: skip
        counts = [len(plan) for plan, _ in plans]
        sentences_of = list(grouped(counts, found))
        translations = [
            [rebuild([h[min(k, len(h) - 1)] for h in hypotheses]) for k in range(parsed.alternatives + 1)]
            for (_, rebuild), hypotheses in zip(plans, sentences_of, strict=True)
        ]
        qualities = [_quality(group, model) for group in sentences_of] if model.estimates else None
        return JSONResponse(translate_response(parsed, translations, detected, qualities))

    @app.get("/languages")
    async def languages() -> JSONResponse:
        """Each language of the served pairs, with the languages it translates into."""
        return JSONResponse(languages_response(pairs))

    @app.post("/detect")
    async def detect(request: Request) -> JSONResponse:
        """Not supported: the server has no language identifier (it says which source languages it serves)."""
        fields = await _read_fields(request)
        keys.check(fields.get("api_key"))
        sources = sorted({source for source, _ in pairs})
        raise ApiError(
            400,
            "Language detection is not supported by this server: it translates from "
            f"{', '.join(sources)}; give source as one of them",
        )

    @app.get("/frontend/settings")
    async def settings_route() -> JSONResponse:
        """The character limit, whether API keys are needed, a default pair, the pairs whose answers are estimated."""
        estimated = {pair: models[pair].min_quality for pair in pairs if models[pair].estimates}
        return JSONResponse(frontend_settings(pairs, limits.chars, keys.required, FRONTEND_TIMEOUT_MS, estimated))

    @app.get("/health")
    async def health() -> JSONResponse:
        """200 `{"status": "ok"}` while every model's translating thread runs (a listening server has its models
        loaded), else 503; with each model's waiting sentences, and an id of the process that answered."""
        served = [
            {"source": s, "target": t, "waiting": lanes[s, t].waiting, "batches": lanes[s, t].batches} for s, t in pairs
        ]
        if not all(lane.alive for lane in lanes.values()):
            return JSONResponse(
                {"status": "error", "error": "a model's thread has stopped", "worker": worker, "models": served}, 503
            )
        return JSONResponse({"status": "ok", "worker": worker, "models": served})

    return app


class ShutdownAnswer:
    """ASGI middleware: a request cancelled before it is answered (uvicorn cancels those still in flight once its
    graceful shutdown time has passed) gets 503 `{"error": "The server is shutting down"}`, not a plain-text 500."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except asyncio.CancelledError:
            if started:
                raise
            task = asyncio.current_task()
            if hasattr(task, "uncancel"):  # Python 3.11+: the cancellation is handled here
                task.uncancel()
            await JSONResponse(error_body("The server is shutting down"), status_code=503)(scope, receive, send)


async def _access_log(request: Request, call_next: Callable) -> object:
    """One log line a request: method, path (never the query string, which could hold a key), status, time."""
    start = time.perf_counter()
    response = await call_next(request)
    milliseconds = 1000 * (time.perf_counter() - start)
    logger.info("%s %s %d %.0f ms", request.method, request.url.path, response.status_code, milliseconds)
    return response


async def _read_fields(request: Request) -> dict:
    """The request's parameters: a JSON object, or a form (urlencoded or multipart)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        return parse_json_fields(await request.body())
    if content_type in FORM_TYPES:
        form = await request.form(max_files=0)
        return form_fields(form.multi_items())
    if not await request.body():
        return {}
    raise ApiError(400, "Invalid request: send the parameters as a form or as JSON (Content-Type: application/json)")


def _refuse_lone_surrogates(fields: dict) -> None:
    """A 400 naming the first field that holds a lone surrogate (JSON's `"\\ud800"`): no text can be made of it."""
    for name, value in fields.items():
        stack = [name, value]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
            elif isinstance(item, str):
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    label = name if name.isascii() else ascii(name)
                    raise ApiError(400, f"Invalid request: {label} holds a lone surrogate, not text") from None


def _pick(request: TranslateRequest, pairs: list[tuple[str, str]]) -> tuple[tuple[str, str], str | None]:
    """The pair translating the request, and the source language `source=auto` stood for (None otherwise)."""
    source, target = request.source, request.target
    known = {code for pair in pairs for code in pair}
    detected = None
    if source == AUTO:
        sources = sorted(s for s, t in pairs if t == target)
        if len(sources) != 1:
            raise ApiError(
                400,
                "Language detection is not supported by this server: give source"
                + (f" (one of {', '.join(sources)})" if sources else ""),
            )
        source = detected = sources[0]
    for code in (source, target):
        if code not in known:
            raise ApiError(400, f"{code} is not supported")
    if (source, target) not in pairs:
        raise ApiError(
            400,
            f"{language_name(target)} ({target}) is not available as a target language from "
            f"{language_name(source)} ({source})",
        )
    return (source, target), detected


def _plan(text: str, text_format: str, language: str) -> tuple[list[str], Callable[[list], str]]:
    """A text's sentences to translate and what puts their translations back into its shape (HTML: translations
    with their alignments)."""
    if text_format == "html":
        document = HtmlDocument.parse(text, language)
        return document.sentences, document.rebuild
    lines = split_document(text, language)
    return [sentence for line in lines for sentence in line], lambda found: join_document(lines, found)


def _quality(sentences: list[Sentence], model: ServedModel) -> dict[str, Any] | None:
    """A text's estimate from its sentences' (None where none was estimated), and with a teacher how many of its
    sentences the teacher re-translated."""
    estimate = joined_estimate([sentence.quality for sentence in sentences])
    if estimate is None:
        return None
    found = estimate.as_dict()
    if model.teacher is not None:
        found["retranslated"] = sum(sentence.retranslated for sentence in sentences)
    return found


async def _translated(
    request: Request, lanes: Lanes, sentences: list[str], n_best: int, glossary: Glossary | None, aligned: bool
) -> list[list]:
    """The sentences' n-best lists from the model's lanes (`aligned`: with alignments); if the client goes first, its
    sentences leave the queue."""
    job = lanes.submit(sentences, n_best, glossary, aligned)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({job.future, gone}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        lanes.cancel(job)
        raise
    finally:
        gone.cancel()
    if not job.future.done():
        lanes.cancel(job)
        raise ApiError(400, "Client disconnected")
    return job.future.result()


async def _disconnected(request: Request) -> None:
    """Return once the client has closed the connection (the body is read: only a disconnect can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


__all__ = ["Batching", "Settings", "build_app", "load_models"]
