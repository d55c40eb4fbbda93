"""`hf-bahdanau serve`: its options and its run, which starts `hf_bahdanau.serving`'s HTTP server. Nothing here
imports the server stack until the command runs, so `--help` answers at once and works without the `serve` extra."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from hf_bahdanau.choices import ENGINES, QUANTIZATIONS
from hf_bahdanau.errors import InputError

from .arguments import UsageError, add_command, add_fallback_arguments, check_fallback_options, positive_int

logger = logging.getLogger("hf_bahdanau.serving")
SETTINGS_VARIABLE = "HF_BAHDANAU_SERVE_SETTINGS"  # how `--workers` processes get the settings
FAILURE_VARIABLE = "HF_BAHDANAU_SERVE_FAILURE"  # the file where a worker that cannot serve says why, for its parent
LOOPBACK = ("127.0.0.1", "::1", "localhost")
# uvicorn's limit for a worker to answer its parent's ping (from its start, before it loads the models: a process
# starting on a busy machine), and to be ready after SIGHUP; a worker dying between a ping and its answer holds the
# parent this long
WORKER_ANSWER_SECONDS = 60
# a worker that cannot serve waits this long before it exits, answering its parent's pings meanwhile: a ping left
# unanswered when it exits holds the parent WORKER_ANSWER_SECONDS (uvicorn's pipe gives the parent no end of file)
ANSWER_PENDING_SECONDS = 0.5
SUMMARY = "serve models over HTTP with the LibreTranslate API, batching requests that arrive together"
EPILOG = """\
examples:
  hf-bahdanau serve --model runs/quick-de-en                          # http://127.0.0.1:5000
  hf-bahdanau serve --model runs/de-en --model runs/en-fr --api-keys keys.txt
  hf-bahdanau serve --model runs/de-en --engine ctranslate2 --threads 4 --workers 2 --host 0.0.0.0
  hf-bahdanau serve --model runs/student-de-en --fallback runs/teacher-de-en --min-quality 0.5
  curl -s localhost:5000/translate -d q="Ein Hund rennt." -d source=de -d target=en
The API is LibreTranslate's (POST /translate, GET /languages, POST /detect, GET /frontend/settings; GET /health):
Mastodon, Weblate, libretranslatepy and libretranslate-aio work with it. docs/serving.md has more.
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `serve` and its options to the command line's subparsers."""
    parser = add_command(commands, "serve", SUMMARY, EPILOG)
    parser.add_argument(
        "--model", action="append", required=True, help="A saved model folder; repeat it to serve several pairs."
    )
    parser.add_argument("--engine", choices=ENGINES, default="torch", help="As `translate --engine`.")
    parser.add_argument("--num-beams", "--num_beams", type=positive_int, help="Beam size (default: the model's).")
    parser.add_argument("--max-new-tokens", "--max_new_tokens", type=positive_int, help="Longest translation.")
    parser.add_argument("--length-penalty", "--length_penalty", type=float, help="As `translate --length-penalty`.")
    parser.add_argument("--quantize", choices=QUANTIZATIONS, help="As `translate --quantize`.")
    parser.add_argument("--threads", type=positive_int, help="CPU threads of each process (default: the engine's).")
    parser.add_argument("--host", default="127.0.0.1", help="The address to listen on (0.0.0.0: every interface).")
    parser.add_argument("--port", type=port, default=5000, help="The port, 0-65535 (0: any free one, logged).")
    parser.add_argument(
        "--workers", type=positive_int, default=1, help="Server processes, each with its own copy of the models."
    )
    parser.add_argument(
        "--api-keys", "--api_keys", metavar="FILE", help="Require one of these keys (one a line) with each request."
    )
    parser.add_argument("--char-limit", "--char_limit", type=positive_int, default=5000, help="Characters a request.")
    parser.add_argument(
        "--sentence-limit", "--sentence_limit", type=positive_int, default=200, help="Sentences a request."
    )
    parser.add_argument(
        "--glossary-terms",
        "--glossary_terms",
        type=positive_int,
        default=10,
        help="Terms of a request's glossary (its characters count toward --char-limit).",
    )
    parser.add_argument(
        "--term-chars",
        "--term_chars",
        type=positive_int,
        default=48,
        help="Characters of each side of a glossary term (a target term lengthens the translations holding it).",
    )
    parser.add_argument(
        "--queue-limit",
        "--queue_limit",
        type=positive_int,
        default=2000,
        help="Sentences that may wait for a model, in each of its queues (with a glossary, without): at least "
        "--sentence-limit; beyond, 429 (retry later).",
    )
    parser.add_argument(
        "--batch-wait-ms",
        "--batch_wait_ms",
        type=float,
        default=20.0,
        help="A free model waits for more sentences until none has come for this long (at most 10 times it).",
    )
    parser.add_argument(
        "--batch-tokens", "--batch_tokens", type=positive_int, default=4096, help="Padded source tokens a batch."
    )
    parser.add_argument("--batch-size", "--batch_size", type=positive_int, default=64, help="Sentences a batch.")
    parser.add_argument(
        "--read-timeout",
        "--read_timeout",
        type=float,
        default=20.0,
        help="Seconds a client has to send a request's headers, and then as long for its body.",
    )
    parser.add_argument(
        "--max-connections",
        "--max_connections",
        type=positive_int,
        default=256,
        help="Connections served at once (each may hold a body of 1 MiB); a request beyond gets 503.",
    )
    parser.add_argument(
        "--shutdown-timeout",
        "--shutdown_timeout",
        type=float,
        default=30.0,
        help="Seconds SIGTERM waits for requests in flight to finish.",
    )
    add_fallback_arguments(parser, "Repeat it for several pairs: each teaches the --model of its language pair.")
    parser.add_argument(
        "--no-quality",
        "--no_quality",
        dest="quality",
        action="store_false",
        help="Answer without the 'quality' field a model folder with a quality estimator adds (its estimates are not "
        "made, which saves their time; with --fallback they still decide what the teacher re-translates).",
    )


def port(text: str) -> int:
    """argparse type: a TCP port, 0-65535 (anything else is a one-line usage error, before any model loads)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {value}")
    return value


def settings_from_args(args: argparse.Namespace) -> Any:
    """The server's `Settings` from the command's options."""
    from hf_bahdanau.serving.app import Batching, Settings
    from hf_bahdanau.serving.limits import Limits
    from hf_bahdanau.serving.model import Decoding

    check_fallback_options(args)
    if not args.read_timeout > 0:
        raise UsageError(f"--read-timeout must be more than 0, got {args.read_timeout:g}")
    if args.batch_wait_ms < 0:
        raise UsageError(f"--batch-wait-ms must be 0 or more, got {args.batch_wait_ms:g}")
    if args.queue_limit < args.sentence_limit:
        raise UsageError(
            f"--queue-limit ({args.queue_limit}) is below --sentence-limit ({args.sentence_limit}): a request of "
            f"{args.sentence_limit} sentences could never be translated"
        )
    decoding = Decoding(
        engine=args.engine,
        num_beams=args.num_beams,
        max_new_tokens=args.max_new_tokens,
        length_penalty=args.length_penalty,
        quantize=args.quantize,
        threads=args.threads,
        batch_size=args.batch_size,
        batch_tokens=args.batch_tokens,
        quality=args.quality,
        min_quality=args.min_quality,
        fallback_engine=args.fallback_engine,
    )
    return Settings(
        models=tuple(args.model),
        decoding=decoding,
        batching=Batching(args.batch_wait_ms / 1000, args.batch_tokens, args.batch_size),
        limits=Limits(
            chars=args.char_limit,
            sentences=args.sentence_limit,
            queue=args.queue_limit,
            glossary_terms=args.glossary_terms,
            term_chars=args.term_chars,
            read_seconds=args.read_timeout,
            connections=args.max_connections,
        ),
        api_keys=args.api_keys,
        fallbacks=tuple(args.fallback or ()),
    )


def run(args: argparse.Namespace) -> None:
    """Serve `--model` folders until SIGTERM or Ctrl-C."""
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError:
        raise UsageError("the server needs FastAPI and uvicorn: pip install 'hf_bahdanau[serve]'") from None
    from hf_bahdanau.serving.app import build_app, load_models
    from hf_bahdanau.serving.connections import server_options
    from hf_bahdanau.serving.limits import ApiKeys

    settings = settings_from_args(args)
    keys = ApiKeys.from_file(settings.api_keys)  # a bad file is refused before any model loads
    if args.host not in LOOPBACK:
        logger.warning(
            "listening on %s: other machines can reach the server%s",
            args.host,
            "" if keys.required else " (no --api-keys: anyone who reaches it can translate)",
        )
    options: dict[str, Any] = dict(
        host=args.host,
        port=args.port,
        log_config=None,  # the command's logging
        access_log=False,  # the app logs each request without its query string
        timeout_graceful_shutdown=args.shutdown_timeout,
        **server_options(settings.limits),  # timeouts for slow clients, a bound on connections
    )
    if args.workers == 1:
        uvicorn.run(build_app(settings), **options)
        return
    load_models(settings)  # each worker loads its own copy: the folders are checked here once
    os.environ[SETTINGS_VARIABLE] = json.dumps(dataclasses.asdict(settings))
    with tempfile.TemporaryDirectory(prefix="hf-bahdanau-serve-") as folder:
        failure = Path(folder) / "failure.txt"
        os.environ[FAILURE_VARIABLE] = str(failure)
        uvicorn.run(
            f"{__name__}:app_from_environment",
            factory=True,
            workers=args.workers,
            timeout_worker_healthcheck=WORKER_ANSWER_SECONDS,
            **options,
        )
        if failure.exists():  # uvicorn stopped because a worker could not start
            reason = failure.read_text(encoding="utf-8").splitlines()[0]
            raise InputError(f"a worker process cannot serve: {reason}")


def app_from_environment() -> Any:
    """A `--workers` process's app, from the settings the command left in the environment. The process imported
    the console script's module (`hf_bahdanau_cli`) first, as its parent did, so it registers the model types here,
    as `main` does. A worker that cannot build its app says why in one line (to the log, and in the parent's
    `FAILURE_VARIABLE` file for the command's error) and exits with uvicorn's start-up failure, which stops the parent
    (uvicorn 0.50 and later) rather than restarting the worker."""
    from uvicorn.config import STARTUP_FAILURE

    from hf_bahdanau import register
    from hf_bahdanau.serving.app import Batching, Settings, build_app
    from hf_bahdanau.serving.limits import Limits
    from hf_bahdanau.serving.model import Decoding

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    register()
    saved = json.loads(os.environ[SETTINGS_VARIABLE])
    settings = Settings(
        models=tuple(saved["models"]),
        decoding=Decoding(**saved["decoding"]),
        batching=Batching(**saved["batching"]),
        limits=Limits(**saved["limits"]),
        api_keys=saved["api_keys"],
        fallbacks=tuple(saved["fallbacks"]),
    )
    try:
        return build_app(settings)
    except Exception as error:  # bad input in one line; anything else is a bug: its traceback
        if isinstance(error, InputError):
            reason = str(error)
            logger.error("a worker cannot serve: %s", reason)
        else:
            reason = f"{type(error).__name__} (its traceback is in the log)"
            logger.exception("a worker cannot serve")
        with open(os.environ[FAILURE_VARIABLE], "a", encoding="utf-8") as record:
            record.write(" ".join(reason.splitlines()) + "\n")
        logging.shutdown()
        time.sleep(ANSWER_PENDING_SECONDS)  # uvicorn's thread answers a ping that came while this one was busy
        os._exit(STARTUP_FAILURE)  # no teardown: its parent's next ping finds it gone, not dying and unanswering


__all__ = ["add_parser", "app_from_environment", "run"]
