"""`hf-bahdanau serve`: the LibreTranslate API spoken to by the real clients (libretranslatepy, libretranslate-aio)
and httpx, on 127.0.0.1 only; translations checked against the `Translator` and the `translate` command."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error

import pytest
from helpers import tiny_translator

from hf_bahdanau.decoding.glossary import Glossary, term_used
from hf_bahdanau.decoding.translator import Translator
from hf_bahdanau.models.pipelines import save_for_pipeline

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
pytestmark = pytest.mark.slow  # servers answering HTTP: end to end (tests/test_serving_parts.py has the parts)

KEY = "k3y-for-tests"
SENTENCES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch im Park."]
BEAMS = 3


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_translator("d2l_transformer", tokenizer, BEAMS, max_new_tokens=12, source_language="de",
                           target_language="en")  # fmt: skip


@pytest.fixture(scope="module")
def en_fr(tokenizer, tmp_path_factory):
    """A second folder, English -> French (an RNN), so the server picks a model by the request's languages."""
    model = tiny_translator("bahdanau", tokenizer, 2, max_new_tokens=8, source_language="en", target_language="fr")
    return save_for_pipeline(model, tokenizer, tmp_path_factory.mktemp("en-fr") / "model")


def reference(model, tokenizer, sentence: str, n_best: int = 1) -> list[str]:
    """The sentence's n-best translations, as `translate` makes them (`--n-best` scores them: generate())."""
    found = Translator(model, tokenizer).translate([sentence], n_best=n_best, num_beams=BEAMS)[0]
    return [hypothesis.text for hypothesis in found.hypotheses]


class Running:
    """A server run by uvicorn in a thread of the test process, on a free port of 127.0.0.1 (`options`: more of
    uvicorn's settings)."""

    def __init__(self, app, **options) -> None:
        import uvicorn

        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False, **options)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


class Held:
    """A served De->En model whose batches wait until `release` is set (`started` is set once one has begun), each
    text translated as itself upper-cased; `batches` records the texts of each batch done. With `plain_at_once`,
    only batches with a glossary wait."""

    pair = ("de", "en")
    folder = "held"
    max_alternatives = 0
    glossary_refusal = None
    estimates = False

    def __init__(self, plain_at_once: bool = False) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.plain_at_once = plain_at_once
        self.batches: list[list[str]] = []

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(text.split()) for text in texts]

    def translate(self, texts: list[str], n_best: int = 1, glossary=None) -> list[list[str]]:
        if glossary is not None or not self.plain_at_once:
            self.started.set()
            assert self.release.wait(60)
        self.batches.append(list(texts))
        return [[text.upper()] for text in texts]


@pytest.fixture(scope="module")
def served(folder, en_fr, tmp_path_factory):
    """The two models served with API keys and small limits (300 characters, 8 sentences a request)."""
    from hf_bahdanau.serving.app import Batching, Settings, build_app
    from hf_bahdanau.serving.connections import server_options
    from hf_bahdanau.serving.limits import Limits

    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(f"# keys of the tests\n\n{KEY}\nanother-key\n", encoding="utf-8")
    settings = Settings(
        models=(str(folder), str(en_fr)),
        batching=Batching(wait=0.02),
        limits=Limits(chars=300, sentences=8, queue=64, body_bytes=4096),
        api_keys=str(keys),
    )
    running = Running(build_app(settings), **server_options(settings.limits))
    yield running.url
    running.stop()


def post(url: str, path: str, timeout: float = 60, **kwargs) -> httpx.Response:
    return httpx.post(url + path, timeout=timeout, **kwargs)


def test_libretranslatepy_translates_lists_languages_and_is_refused_without_a_good_key(served, model, tokenizer):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(served, api_key=KEY)
    assert client.translate(SENTENCES[0], "de", "en") == reference(model, tokenizer, SENTENCES[0])[0]
    assert client.languages() == [
        {"code": "de", "name": "German", "targets": ["en"]},
        {"code": "en", "name": "English", "targets": ["fr"]},
        {"code": "fr", "name": "French", "targets": []},
    ]
    for key, status, message in (("wrong", 403, "Invalid API key"), (None, 400, "get an API key")):
        with pytest.raises(urllib.error.HTTPError) as refused:
            LibreTranslateAPI(served, api_key=key).translate(SENTENCES[0], "de", "en")
        assert refused.value.code == status and message in json.loads(refused.value.read())["error"]
    with pytest.raises(urllib.error.HTTPError) as detect:  # no language identifier: said plainly
        client.detect("Ein Hund.")
    assert detect.value.code == 400
    assert json.loads(detect.value.read())["error"].startswith("Language detection is not supported by this server")


def test_libretranslate_aio_translates_a_list_with_alternatives_and_names_its_errors(served, model, tokenizer):
    import libretranslate_aio as lt

    async def session():
        async with lt.AsyncLibreTranslate(served, api_key=KEY, timeout=60) as client:
            found = await client.translate(SENTENCES, "de", "en", alternatives=2)
            settings = await client.frontend_settings()
            healthy = await client.health()
            errors = []
            for call in (client.translate("Hallo", "xx", "en"), client.translate("Hallo", "de", "fr")):
                with pytest.raises(lt.BadRequestError) as error:
                    await call
                errors.append(error.value.message)
            async with lt.AsyncLibreTranslate(served, api_key="nope") as stranger:
                with pytest.raises(lt.ForbiddenError):
                    await stranger.translate("Hallo", "de", "en")
            return found, settings, healthy, errors

    found, settings, healthy, errors = asyncio.run(session())
    n_best = [reference(model, tokenizer, sentence, 3) for sentence in SENTENCES]
    assert found.translated_text == [reference(model, tokenizer, sentence)[0] for sentence in SENTENCES]
    distinct = [[t for i, t in enumerate(h) if i and t and t not in h[:i]] for h in n_best]
    assert found.alternatives == distinct and found.detected_language is None
    assert settings.char_limit == 300 and settings.api_keys and settings.key_required and healthy
    assert errors == ["xx is not supported", "French (fr) is not available as a target language from German (de)"]


def test_models_are_picked_by_source_and_target_and_auto_stands_for_the_only_source(served, en_fr, tokenizer):
    from transformers import AutoModelForSeq2SeqLM

    rnn = AutoModelForSeq2SeqLM.from_pretrained(en_fr).eval()
    expected = Translator(rnn, tokenizer).translate(["A man is riding a bicycle."], num_beams=2)[0].text
    body = {"q": "A man is riding a bicycle.", "source": "auto", "target": "fr", "api_key": KEY}
    answer = post(served, "/translate", json=body).json()
    assert answer == {"translatedText": expected, "detectedLanguage": {"confidence": 0.0, "language": "en"}}


def test_same_output_as_the_translate_command_for_sentences_and_a_document(served, folder, monkeypatch, capsys):
    from hf_bahdanau.cli import main

    document = f"{SENTENCES[0]} {SENTENCES[1]}\n\n{SENTENCES[2]}"
    command = ["translate", "--model", str(folder)]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(SENTENCES) + "\n"))
    assert main(command) == 0
    lines = capsys.readouterr().out.splitlines()
    monkeypatch.setattr(sys, "stdin", io.StringIO(document))
    assert main([*command, "--document", "-"]) == 0
    paragraphs = capsys.readouterr().out
    answer = post(served, "/translate", data={"q": [*SENTENCES, document], "source": "de", "target": "en",
                                              "api_key": KEY}).json()  # fmt: skip
    assert answer["translatedText"] == [*lines, paragraphs.rstrip("\n")]
    assert len(lines) == 3 and all(lines)


def test_a_glossary_field_places_its_terms_as_the_translator_does_and_clients_without_it_are_unaffected(
    served, model, tokenizer
):
    glossary = {"Hunde": "hounds", "Fahrrad": "bike"}
    expected = [t.text for t in Translator(model, tokenizer).translate(SENTENCES, num_beams=BEAMS, glossary=glossary)]
    request = {"q": SENTENCES, "source": "de", "target": "en", "api_key": KEY}
    answer = post(served, "/translate", json={**request, "glossary": glossary}).json()
    assert answer["translatedText"] == expected
    assert term_used("hounds", expected[1]) and term_used("bike", expected[0])
    lines = "Hunde\thounds\nFahrrad\tbike\n"
    assert post(served, "/translate", data={**request, "glossary": lines}).json()["translatedText"] == expected
    assert post(served, "/translate", json=request).json()["translatedText"] == [
        reference(model, tokenizer, sentence)[0] for sentence in SENTENCES
    ]
    refused = post(served, "/translate", json={**request, "glossary": "Hunde hounds"})
    assert refused.status_code == 400 and "glossary" in refused.json()["error"]


def test_a_glossary_counts_toward_the_text_limit_and_its_terms_and_their_lengths_are_bounded(served):
    request = {"q": "Ein Hund.", "source": "de", "target": "en", "api_key": KEY}
    for glossary, message in (
        ({f"Wort{i}": "word" for i in range(11)}, "Invalid request: glossary (11 terms) exceeds glossary limit (10)"),
        (
            "".join(f"Wort{i}\tword\n" for i in range(13)),
            "Invalid request: glossary (12 terms) exceeds glossary limit (10)",
        ),
        ({"Hund": "very " * 9 + "long"}, "Invalid request: a glossary term (49) exceeds term limit (48)"),
        ({f"{i}" * 40: "x" * 40 for i in range(4)}, "Invalid request: request (329) exceeds text limit (300)"),
    ):
        response = post(served, "/translate", json={**request, "glossary": glossary})
        assert (response.status_code, response.json()) == (400, {"error": message})


def test_html_is_translated_by_sentence_with_its_tags_on_the_aligned_words(served, model, tokenizer):
    page = ('<p class="x">Ein Mann fährt Fahrrad.</p>\n<p>Zwei Hunde <b>spielen</b> im Schnee &amp; Eis.<br></p>'
            '<a title="x > y" href="/home">Ein Buch</a>')  # fmt: skip
    answer = post(served, "/translate", json={"q": page, "source": "de", "target": "en", "format": "html",
                                              "api_key": KEY}).json()  # fmt: skip
    assert answer == {"translatedText": Translator(model, tokenizer).translate_html([page], num_beams=BEAMS)[0]}


BAD_REQUESTS = [  # (what is sent, status, start of the error message)
    ({"json": {"source": "de", "target": "en"}}, 400, "Invalid request: missing q parameter"),
    ({"json": {"q": "Hallo", "target": "en"}}, 400, "Invalid request: missing source parameter"),
    ({"data": {"q": "Hallo", "source": "de"}}, 400, "Invalid request: missing target parameter"),
    ({"json": {"q": [1, 2], "source": "de", "target": "en"}}, 400, "Invalid request: q must be a string or a list"),
    ({"json": {"q": "Hallo", "source": "de", "target": "en", "format": "xml"}}, 400, "xml format is not supported"),
    ({"json": {"q": "Hallo", "source": "de", "target": "en", "alternatives": "x"}}, 400, "Invalid request: altern"),
    (
        {"json": {"q": "Hallo", "source": "de", "target": "en", "alternatives": 3}},
        400,
        "Invalid request: alternatives parameter must be <= 2",
    ),
    ({"json": {"q": "Hallo", "source": "xx", "target": "en"}}, 400, "xx is not supported"),
    ({"json": {"q": "Hallo", "source": "auto", "target": "de"}}, 400, "Language detection is not supported"),
    ({"json": {"q": "Hello", "source": "en", "target": "de"}}, 400, "German (de) is not available as a target"),
    ({"content": b'{"q": "Hallo", ', "headers": {"content-type": "application/json"}}, 400, "Invalid JSON format"),
    ({"content": b"[1, 2]", "headers": {"content-type": "application/json"}}, 400, "Invalid JSON format"),
    ({"content": b"\xff\xfe", "headers": {"content-type": "application/json"}}, 400, "Invalid JSON format"),
    ({"content": b"q=Hallo", "headers": {"content-type": "text/plain"}}, 400, "Invalid request: send the parameters"),
    (
        {"json": {"q": "Hallo " * 60, "source": "de", "target": "en"}},
        400,
        "Invalid request: request (360) exceeds text limit (300)",
    ),
    (
        {"json": {"q": ["Ja. Nein."] * 5, "source": "de", "target": "en"}},
        400,
        "Invalid request: request (10 sentences) exceeds sentence limit (8)",
    ),
    (
        {"json": {"q": [""] * 9, "source": "de", "target": "en"}},
        400,
        "Invalid request: request (9 texts) exceeds sentence limit (8)",
    ),
    (
        {"content": b'{"q": ' + b"[" * 1500 + b"]" * 1500 + b"}", "headers": {"content-type": "application/json"}},
        400,
        "Invalid JSON format: nested too deeply",
    ),
    ({"content": b"x" * 5000, "headers": {"content-type": "application/json"}}, 413, "Invalid request: the body"),
    ({"files": {"q": ("a.txt", b"Hallo")}, "data": {"source": "de", "target": "en"}}, 400, "Too many files"),
]


@pytest.mark.parametrize("with_key", [True, False])
def test_every_bad_request_gets_its_status_and_error_then_the_server_translates(served, model, tokenizer, with_key):
    for sent, status, message in BAD_REQUESTS:
        if with_key and "json" in sent:
            sent = {"json": {**sent["json"], "api_key": KEY}}
        elif with_key and "data" in sent:
            sent = {**sent, "data": {**sent["data"], "api_key": KEY}}
        response = post(served, "/translate", **sent)
        if not with_key and ("json" in sent or "data" in sent) and "files" not in sent:
            status, message = 400, "Please contact the server operator"  # the key is checked before the rest
        assert (response.status_code, response.json()["error"][: len(message)]) == (status, message), sent
    assert httpx.get(served + "/translate", timeout=10).json() == {"error": "Method Not Allowed"}
    assert httpx.get(served + "/nowhere", timeout=10).status_code == 404
    answer = post(served, "/translate", data={"q": SENTENCES[1], "source": "de", "target": "en", "api_key": KEY})
    assert answer.json() == {"translatedText": reference(model, tokenizer, SENTENCES[1])[0]}
    assert httpx.get(served + "/health", timeout=10).json()["status"] == "ok"


def test_a_lone_surrogate_in_any_field_gets_400_and_in_the_key_403_without_a_traceback(served, caplog):
    fields = f'"q": "Hallo", "source": "de", "target": "en", "format": "html", "api_key": "{KEY}"'
    for given, status, message in (
        (fields.replace('"Hallo"', '"Hallo \\ud800"'), 400, "Invalid request: q holds a lone surrogate, not text"),
        (fields.replace('"Hallo"', '"<b title=\\"\\udfff\\">Hallo</b>"'), 400, "Invalid request: q holds"),
        (fields.replace('"de"', '"d\\ud800"'), 400, "Invalid request: source holds a lone surrogate"),
        (fields.replace('"html"', '"\\ud800"'), 400, "Invalid request: format holds a lone surrogate"),
        (fields + ', "glossary": {"Hund": "\\ud800"}', 400, "Invalid request: glossary holds a lone surrogate"),
        (fields.replace(KEY, "\\ud800"), 403, "Invalid API key"),
    ):
        body = ("{" + given + "}").encode()
        response = post(served, "/translate", content=body, headers={"content-type": "application/json"})
        assert (response.status_code, response.json()["error"][: len(message)]) == (status, message), given
    assert not [record for record in caplog.records if record.levelname == "ERROR"]


def test_a_fixed_load_of_concurrent_requests_is_answered_in_time_and_batched(served, model, tokenizer):
    expected = {sentence: reference(model, tokenizer, sentence)[0] for sentence in SENTENCES}
    before = {m["source"]: m["batches"] for m in httpx.get(served + "/health", timeout=10).json()["models"]}["de"]

    async def load(requests: int = 48, clients: int = 16):
        limit = asyncio.Semaphore(clients)
        async with httpx.AsyncClient(base_url=served, timeout=60) as client:

            async def one(i: int):
                async with limit:
                    body = {"q": SENTENCES[i % 3], "source": "de", "target": "en", "api_key": KEY}
                    return (await client.post("/translate", json=body)).json()["translatedText"], SENTENCES[i % 3]

            return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(requests))), timeout=120)

    start = time.monotonic()
    answers = asyncio.run(load())
    assert time.monotonic() - start < 120
    assert [text for text, _ in answers] == [expected[sentence] for _, sentence in answers]
    after = {m["source"]: m["batches"] for m in httpx.get(served + "/health", timeout=10).json()["models"]}["de"]
    assert after - before < 48  # requests arriving together shared batches


def serve_process(command: list[str], *options: str) -> tuple[subprocess.Popen, str, list[str]]:
    """`command serve` (the console script) in a process group of its own on a free port of 127.0.0.1; its URL once
    it listens, and its log (lines, read on in a thread)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen([*command, "serve", "--port", "0", *options], stderr=subprocess.PIPE, text=True,
                               env=env, start_new_session=True)  # fmt: skip
    log: list[str] = []
    deadline = time.monotonic() + 120
    for line in process.stderr:
        log.append(line)
        found = re.search(r"running on http://127\.0\.0\.1:(\d+)", line)
        if found:  # the rest of the log read on, so the server never waits on a full pipe
            threading.Thread(target=lambda: log.extend(process.stderr), daemon=True).start()
            return process, f"http://127.0.0.1:{found.group(1)}", log
        assert time.monotonic() < deadline, "the server did not start"
    raise AssertionError(f"the server stopped: {process.wait(10)}\n{''.join(log[-20:])}")


def kill_group(process: subprocess.Popen) -> None:
    """End a `serve_process` and its workers."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(30)


def wait_for(condition, seconds: float, what: str, log: list[str] = ()) -> None:
    """Return once `condition()` is true; fail after `seconds` saying `what` (and the end of a server's `log`)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what}\n{''.join(log[-30:])}"
        time.sleep(0.05)


def healthy(url: str) -> dict | None:
    """`/health`'s answer, or None while nothing answers it."""
    try:
        answer = httpx.get(url + "/health", timeout=10)
    except httpx.TransportError:
        return None
    return answer.json() if answer.status_code == 200 else None


def test_a_worker_process_answers_its_parent_before_importing_torch():
    """A `--workers` process unpickles its settings (the connection protocol) before it answers its parent's pings:
    on a busy machine, importing torch and transformers then would outlast uvicorn's wait, and the worker be killed."""
    code = ("import sys, hf_bahdanau_cli, hf_bahdanau.serving.connections; "
            "print(sorted({'torch', 'transformers'} & set(sys.modules)))")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert (found.returncode, found.stdout) == (0, "[]\n"), found.stderr


def test_the_console_script_serves_with_worker_processes_and_sigterm_lets_requests_in_flight_finish(
    folder, model, tokenizer
):
    script = shutil.which("hf-bahdanau")
    if script is None:
        pytest.skip("the hf-bahdanau console script is not installed")
    # as the README starts it; requests wait for one another: they are in flight when SIGTERM comes
    process, url, log = serve_process([script], "--model", str(folder), "--workers", "2", "--batch-wait-ms", "3000")
    try:
        wait_for(lambda: healthy(url) is not None, 300, "no worker became ready", log)  # they load the model first
        answers = {}

        def ask(sentence: str) -> None:
            answers[sentence] = post(url, "/translate", json={"q": sentence, "source": "de", "target": "en"})

        threads = [threading.Thread(target=ask, args=(sentence,)) for sentence in SENTENCES]
        for thread in threads:
            thread.start()
        waiting = {}  # each worker's waiting sentences, as its latest /health said

        def all_waiting() -> bool:
            if (health := healthy(url)) is not None:
                waiting[health["worker"]] = health["models"][0]["waiting"]
            return sum(waiting.values()) == len(SENTENCES)

        wait_for(all_waiting, 60, "the requests did not reach the workers", log)
        process.send_signal(signal.SIGTERM)  # while every request waits for its batch
        for thread in threads:
            thread.join(60)
        assert process.wait(60) == 0  # the workers finished their requests, then the server ended
        for sentence in SENTENCES:
            assert answers[sentence].status_code == 200
            assert answers[sentence].json() == {"translatedText": reference(model, tokenizer, sentence)[0]}
    finally:
        kill_group(process)


def test_serve_exits_with_the_one_line_error_of_a_worker_process_that_cannot_serve(folder, tmp_path):
    """The command checks the folder, then its workers find it gone (`sitecustomize` changes the settings of spawned
    processes only): uvicorn stops, and the command fails saying why."""
    gone = tmp_path / "gone"
    (tmp_path / "sitecustomize.py").write_text(
        "import json, os, sys\n"
        "if '--multiprocessing-fork' in sys.argv:\n"
        "    saved = json.loads(os.environ['HF_BAHDANAU_SERVE_SETTINGS'])\n"
        f"    saved['models'] = [{str(gone)!r}]\n"
        "    os.environ['HF_BAHDANAU_SERVE_SETTINGS'] = json.dumps(saved)\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    command = [
        sys.executable,
        "-m",
        "hf_bahdanau.cli",
        "serve",
        "--model",
        str(folder),
        "--workers",
        "2",
        "--port",
        "0",
    ]
    found = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    lines = found.stderr.strip().splitlines()
    assert found.returncode == 1, found.stderr[-3000:]
    assert lines[-1].endswith(f"a worker process cannot serve: {gone} is not a saved model folder (no config.json)")


def test_a_client_that_goes_frees_its_place_in_the_queue():
    from hf_bahdanau.serving.app import Batching, Settings, build_app

    model = Held()
    model.release.set()
    running = Running(build_app(Settings(models=("held",), batching=Batching(wait=2.0)), {model.pair: model}))
    request = {"q": "Ein Hund.", "source": "de", "target": "en"}
    try:
        with pytest.raises(httpx.ReadTimeout):  # the client gives up while its sentence waits for a batch
            post(running.url, "/translate", json=request, timeout=0.3)
        wait_for(lambda: healthy(running.url)["models"][0]["waiting"] == 0, 1.5, "the sentence still waits")
        later = post(running.url, "/translate", json={**request, "q": "Zwei Katzen."})  # waits 2 s for its batch
        assert later.json() == {"translatedText": "ZWEI KATZEN."}
        assert model.batches == [["Zwei Katzen."]]  # the first sentence was never translated
    finally:
        running.stop()


def test_a_glossary_request_holds_no_plain_request_and_one_whose_client_left_is_never_translated():
    from hf_bahdanau.serving.app import Batching, Settings, build_app

    model = Held(plain_at_once=True)  # a glossary batch runs until released, as a long target term would make it
    running = Running(build_app(Settings(models=("held",), batching=Batching(wait=0.0)), {model.pair: model}))
    port = int(running.url.rsplit(":", 1)[1])
    plain = {"q": "Zwei Katzen.", "source": "de", "target": "en"}
    request = {**plain, "q": "Ein Hund.", "glossary": {"Hund": "hound"}}
    answers = []
    slow = threading.Thread(target=lambda: answers.append(post(running.url, "/translate", json=request)))
    slow.start()
    try:
        assert model.started.wait(30)
        answer = post(running.url, "/translate", json=plain, timeout=20)
        assert answer.json() == {"translatedText": "ZWEI KATZEN."}  # answered while the glossary batch runs
        body = json.dumps({**request, "q": "Drei Mäuse."}).encode()
        leaving = socket.create_connection(("127.0.0.1", port), timeout=10)  # a glossary request, behind the first
        leaving.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        wait_for(lambda: healthy(running.url)["models"][0]["waiting"] == 1, 10, "the request did not wait")
        leaving.close()  # its client leaves while it waits
        wait_for(lambda: healthy(running.url)["models"][0]["waiting"] == 0, 10, "the request still waits")
        model.release.set()
        slow.join(30)
        assert answers[0].json() == {"translatedText": "EIN HUND."}
        assert model.batches == [["Zwei Katzen."], ["Ein Hund."]]  # "Drei Mäuse." never translated
    finally:
        model.release.set()
        running.stop()


def test_stopping_answers_requests_still_in_flight_after_the_shutdown_timeout_with_503_and_ends_in_time():
    from hf_bahdanau.serving.app import Batching, Settings, build_app

    model = Held()  # its batch runs until released: longer than the shutdown timeout
    running = Running(build_app(Settings(models=("held",), batching=Batching(wait=0.0)), {model.pair: model}),
                      timeout_graceful_shutdown=1)  # fmt: skip
    answers = []
    client = threading.Thread(target=lambda: answers.append(
        post(running.url, "/translate", json={"q": "Ein Hund.", "source": "de", "target": "en"})))  # fmt: skip
    client.start()
    try:
        assert model.started.wait(30)
        start = time.monotonic()
        running.server.should_exit = True  # what SIGTERM does
        running.thread.join(20)
        assert not running.thread.is_alive() and time.monotonic() - start < 5  # 1 s of grace, then 503 and stop
        client.join(10)
        assert (answers[0].status_code, answers[0].json()) == (503, {"error": "The server is shutting down"})
    finally:
        model.release.set()
        running.stop()


def test_slow_clients_are_cut_off_after_the_read_timeout_and_connections_beyond_the_limit_get_503():
    from hf_bahdanau.serving.app import Batching, Settings, build_app
    from hf_bahdanau.serving.connections import server_options
    from hf_bahdanau.serving.limits import Limits

    model = Held()
    model.release.set()
    limits = Limits(read_seconds=1.0, connections=4)
    settings = Settings(models=("held",), batching=Batching(wait=0.0), limits=limits)
    running = Running(build_app(settings, {model.pair: model}), **server_options(limits))
    port = int(running.url.rsplit(":", 1)[1])
    head = b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    body = b'{"q": "Ein Hund.", "source": "de", "target": "en"}'
    opened: list[socket.socket] = []

    def connect(data: bytes) -> socket.socket:
        connection = socket.create_connection(("127.0.0.1", port), timeout=10)
        connection.sendall(data)
        opened.append(connection)
        return connection

    def until_closed(connection: socket.socket) -> bytes:
        """What the server sends until it closes the connection (a socket timeout, 10 s, fails the test)."""
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        start = time.monotonic()
        stalled = [connect(head) for _ in range(4)]  # headers never finished: the four places taken
        wait_for(lambda: healthy(running.url) is None, 5, "a fifth connection was served")  # 503: at the limit
        assert [until_closed(connection) for connection in stalled] == [b""] * 4  # closed, unanswered
        assert time.monotonic() - start < 6
        slow = connect(head + b"Content-Length: %d\r\n\r\n" % (len(body) + 10) + body)  # 10 bytes never come
        answer = until_closed(slow)
        assert answer.startswith(b"HTTP/1.1 408 ") and b"connection: close" in answer.lower()
        assert answer.endswith(b'{"error":"Invalid request: the body did not come within 1 s"}')
        assert post(running.url, "/translate", json=json.loads(body)).json() == {"translatedText": "EIN HUND."}
    finally:
        for connection in opened:
            connection.close()
        running.stop()


def test_serve_refuses_a_folder_it_cannot_route_to_in_one_line(tokenizer, tmp_path, caplog):
    from hf_bahdanau.cli import main

    unnamed = save_for_pipeline(tiny_translator("d2l_transformer", tokenizer, 2), tokenizer, tmp_path / "unnamed")
    keys = tmp_path / "keys.txt"
    keys.write_text("two words\n", encoding="utf-8")
    for argv, message in (
        (["--model", str(tmp_path / "nowhere")], "is not a saved model folder (no config.json)"),
        (["--model", str(unnamed)], "records no language pair (source_language and target_language in its config)"),
        (["--model", str(unnamed), "--api-keys", str(keys)], "keys.txt line 1: an API key has no spaces inside"),
    ):
        assert main(["serve", *argv]) == 1
        assert message in caplog.records[-1].getMessage() and "\n" not in caplog.records[-1].getMessage()


@pytest.mark.parametrize("given", ["99999", "-1", "65536", "http"])
def test_serve_refuses_a_port_outside_0_to_65535_before_loading_any_model(given, tmp_path, capsys):
    from hf_bahdanau.cli import main

    with pytest.raises(SystemExit) as refused:  # argparse's usage error: the missing folder is never looked at
        main(["serve", "--model", str(tmp_path / "nowhere"), "--port", given])
    assert refused.value.code == 2
    assert "argument --port: expected a port number (0-65535)" in capsys.readouterr().err


def test_serve_refuses_a_queue_limit_below_the_sentence_limit_before_loading_any_model(tmp_path, caplog):
    from hf_bahdanau.cli import main

    argv = ["serve", "--model", str(tmp_path / "nowhere"), "--queue-limit", "20", "--sentence-limit", "25"]
    assert main(argv) == 1
    assert (
        caplog.records[-1]
        .getMessage()
        .endswith(
            "--queue-limit (20) is below --sentence-limit (25): a request of 25 sentences could never be translated"
        )
    )


@pytest.mark.skipif(not __import__("importlib").util.find_spec("ctranslate2"), reason="CTranslate2 not installed")
@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_a_served_model_translates_with_and_without_a_glossary_as_the_translator_does(folder, engine):
    from hf_bahdanau.serving.model import Decoding, ServedModel

    glossary = Glossary.from_pairs({"Hunde": "hounds", "Fahrrad": "bike"})
    served = ServedModel(folder, Decoding(engine=engine))
    plain = Translator.from_folder(folder, engine=engine).translate(SENTENCES)
    with_terms = Translator.from_folder(folder).translate(SENTENCES, glossary=glossary)  # torch places the terms
    assert served.translate(SENTENCES) == [[t.text] for t in plain]
    assert served.translate(SENTENCES, glossary=glossary) == [[t.text] for t in with_terms]
    assert served.max_alternatives >= 1  # alternatives from either engine, as translate --n-best gives them
    two_best = Translator.from_folder(folder, engine=engine).translate(SENTENCES, n_best=2)
    assert served.translate(SENTENCES, n_best=2) == [[h.text for h in t.hypotheses] for t in two_best]
