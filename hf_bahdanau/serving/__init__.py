"""`hf-bahdanau serve`: an HTTP server speaking the LibreTranslate API (the one Mastodon, Weblate, `libretranslatepy`
and `libretranslate-aio` speak), translating requests that arrive together in one batch.

Built on FastAPI and uvicorn: both maintained, FastAPI (Starlette) parses form-encoded, multipart and JSON bodies,
and uvicorn finishes in-flight requests on SIGTERM and runs several worker processes (`--workers`). LitServe was
not chosen: its batching assumes one model per server, and this server picks one of several models by each
request's `source` and `target`.

Modules, one job each: `shapes` (LibreTranslate's requests, responses and errors), `limits` (request limits and API
keys), `model` (the one place the server reaches the package's translation code; HTML is `decoding.markup`'s),
`batching` (the queue that gathers sentences into batches), `connections` (uvicorn's settings, deadlines for slow
clients), `app` (the routes); `hf_bahdanau.cli.serve` is the command.
"""
