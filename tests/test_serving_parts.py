"""The server's parts without HTTP: the batching queue, HTML pieces, API keys and request shapes."""

from __future__ import annotations

import asyncio
import threading

import pytest

pytest.importorskip("fastapi")

from hf_bahdanau.decoding.glossary import Glossary  # noqa: E402
from hf_bahdanau.serving.batching import Batcher, Lanes  # noqa: E402
from hf_bahdanau.serving.limits import ApiKeys, Limits  # noqa: E402
from hf_bahdanau.serving.shapes import ApiError, form_fields, parse_translate  # noqa: E402


class Recorder:
    """A translate function that records its batches: each text's n-best list is the text upper-cased, then
    numbered variants; `gate` (when set) holds every batch until opened."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.batches: list[tuple[list[str], int]] = []
        self.gate = gate

    def translate(self, texts: list[str], n_best: int, glossary=None, aligned: bool = False) -> list[list]:
        if self.gate is not None:
            assert self.gate.wait(30)
        self.batches.append((list(texts), n_best) if glossary is None else (list(texts), n_best, glossary))
        found = [[text.upper()] + [f"{text}#{k}" for k in range(1, n_best)] for text in texts]
        return [[(text, "0-0") for text in hypotheses] for hypotheses in found] if aligned else found


def words(texts: list[str]) -> list[int]:
    return [len(text.split()) for text in texts]


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 30))


def test_requests_arriving_together_share_a_batch_and_get_their_own_translations():
    recorder = Recorder()

    async def main():
        batcher = Batcher(recorder.translate, words, wait=0.05)
        batcher.start()
        jobs = [batcher.submit(texts) for texts in (["a b", "c"], ["d"], ["e f g"])]
        found = await asyncio.gather(*(job.future for job in jobs))
        await asyncio.to_thread(batcher.close)
        return found

    assert run(main()) == [[["A B"], ["C"]], [["D"]], [["E F G"]]]
    assert recorder.batches == [(["a b", "c", "d", "e f g"], 1)]


def test_the_token_budget_and_the_alternatives_cut_batches_in_arrival_order():
    recorder = Recorder()

    async def main():
        batcher = Batcher(recorder.translate, words, wait=0.05, batch_tokens=6, batch_size=64)
        batcher.start()
        first = batcher.submit(["a b", "c d", "e f", "g"])  # 3 x 2 tokens fill the budget; "g" goes next
        other = batcher.submit(["h"], n_best=2)  # two alternatives: a batch of its own
        found = await asyncio.gather(first.future, other.future)
        await asyncio.to_thread(batcher.close)
        return found

    first, other = run(main())
    assert first == [["A B"], ["C D"], ["E F"], ["G"]] and other == [["H", "h#1"]]
    assert recorder.batches == [(["a b", "c d", "e f"], 1), (["g"], 1), (["h"], 2)]


def test_requests_with_another_glossary_wait_for_a_batch_of_their_own_and_get_it_passed():
    recorder = Recorder()
    dogs = Glossary.from_pairs({"Hund": "hound"})

    async def main():
        batcher = Batcher(recorder.translate, words, wait=0.05)
        batcher.start()
        jobs = [batcher.submit(["a"]), batcher.submit(["b"], glossary=dogs), batcher.submit(["c"]),
                batcher.submit(["d"], glossary=Glossary.from_pairs({"Hund": "hound"}))]  # fmt: skip
        found = await asyncio.gather(*(job.future for job in jobs))
        await asyncio.to_thread(batcher.close)
        return found

    assert run(main()) == [[["A"]], [["B"]], [["C"]], [["D"]]]
    assert recorder.batches == [(["a", "c"], 1), (["b", "d"], 1, dogs)]  # equal glossaries share a batch


def test_requests_asking_for_alignments_wait_for_a_batch_of_their_own_and_get_them():
    recorder = Recorder()

    async def main():
        batcher = Batcher(recorder.translate, words, wait=0.05)
        batcher.start()
        jobs = [batcher.submit(["a"]), batcher.submit(["b"], aligned=True), batcher.submit(["c"])]
        found = await asyncio.gather(*(job.future for job in jobs))
        await asyncio.to_thread(batcher.close)
        return found

    assert run(main()) == [[["A"]], [[("B", "0-0")]], [["C"]]]
    assert recorder.batches == [(["a", "c"], 1), (["b"], 1)]


def test_requests_with_a_glossary_have_their_own_lane_and_a_held_glossary_batch_holds_no_other_request():
    gate = threading.Event()
    dogs = Glossary.from_pairs({"Hund": "hound"})

    def translate(texts: list[str], n_best: int, glossary=None) -> list[list[str]]:
        if glossary is not None:  # a long target term: its batch runs until the gate opens
            assert gate.wait(30)
        return [[text.upper()] for text in texts]

    async def main():
        lanes = Lanes(translate, words, wait=0.0)
        lanes.start()
        held = lanes.submit(["a"], glossary=dogs)
        while lanes.waiting:  # taken into a batch, held by the gate
            await asyncio.sleep(0.01)
        behind = lanes.submit(["b"], glossary=dogs)
        plain = await asyncio.wait_for(lanes.submit(["c", "d"]).future, 10)  # while the glossary batch runs
        waiting = lanes.waiting
        lanes.cancel(behind)  # its client went
        after = lanes.waiting
        gate.set()
        found = await held.future
        await asyncio.to_thread(lanes.close)
        return plain, waiting, after, found, behind.future.done(), lanes.batches

    assert run(main()) == ([["C"], ["D"]], 1, 0, [["A"]], False, 2)  # "b" was never translated


def test_a_glossary_field_is_read_from_json_pairs_and_form_lines_and_refused_when_malformed():
    base = {"q": "Ein Hund.", "source": "de", "target": "en"}
    expected = Glossary.from_pairs({"Hund": "hound", "Katze": "cat"})
    assert parse_translate(base).glossary is None
    assert parse_translate({**base, "glossary": {"Hund": "hound", "Katze": "cat"}}).glossary == expected
    assert parse_translate({**base, "glossary": [["Hund", "hound"], ["Katze", "cat"]]}).glossary == expected
    assert parse_translate({**base, "glossary": "Hund\thound\nKatze\tcat\n"}).glossary == expected
    for header in ("source\ttarget", "de\ten", "# a comment\nsrc\ttgt"):  # skipped, as a glossary file's
        assert parse_translate({**base, "glossary": f"{header}\nHund\thound\nKatze\tcat"}).glossary == expected
    for bad in ("Hund hound", 3, [["Hund"]], {"Hund": ""}):
        with pytest.raises(ApiError) as error:
            parse_translate({**base, "glossary": bad})
        assert error.value.status == 400 and "glossary" in error.value.message


def test_a_full_queue_refuses_with_429_and_a_gone_client_frees_its_place():
    gate = threading.Event()
    recorder = Recorder(gate)

    async def main():
        batcher = Batcher(recorder.translate, words, wait=0.0, batch_size=1, queue_limit=3)
        batcher.start()
        first = batcher.submit(["a"])  # taken into a batch held by the gate
        while batcher.waiting:
            await asyncio.sleep(0.01)
        waiting = batcher.submit(["b", "c", "d"])
        with pytest.raises(ApiError) as full:
            batcher.submit(["e"])
        batcher.cancel(waiting)  # its client went: its three places are free again
        assert batcher.waiting == 0
        last = batcher.submit(["f"])
        gate.set()
        found = await asyncio.gather(first.future, last.future)
        await asyncio.to_thread(batcher.close)
        return full.value, found, waiting.future.done()

    full, found, answered = run(main())
    assert full.status == 429 and full.message.startswith("Slowdown: 3 sentences are waiting")
    assert full.headers == {"Retry-After": "1"}
    assert found == [[["A"]], [["F"]]] and not answered
    assert [texts for texts, _ in recorder.batches] == [["a"], ["f"]]  # b, c, d never translated


def test_a_request_of_more_sentences_than_the_queue_holds_is_refused_with_400_not_told_to_retry():
    async def main():
        batcher = Batcher(Recorder().translate, words, wait=0.0, queue_limit=3)
        batcher.start()
        with pytest.raises(ApiError) as refused:
            batcher.submit(["a", "b", "c", "d"])
        found = await batcher.submit(["a", "b", "c"]).future
        await asyncio.to_thread(batcher.close)
        return refused.value, found

    refused, found = run(main())
    assert (refused.status, refused.message) == (400, "Invalid request: request (4 sentences) exceeds the queue (3)")
    assert not refused.headers and found == [["A"], ["B"], ["C"]]
    with pytest.raises(ValueError, match=r"the queue limit \(20\) is below the sentence limit \(25\)"):
        Limits(sentences=25, queue=20)


def test_a_failing_batch_answers_500_and_the_queue_goes_on():
    calls = []

    def translate(texts, n_best, glossary=None):
        calls.append(texts)
        if texts == ["boom"]:
            raise RuntimeError("broken")
        return [[text] for text in texts]

    async def main():
        batcher = Batcher(translate, words, wait=0.0)
        batcher.start()
        failed = batcher.submit(["boom"])
        with pytest.raises(ApiError) as error:
            await failed.future
        fine = await batcher.submit(["ok"]).future
        assert batcher.alive
        await asyncio.to_thread(batcher.close)
        with pytest.raises(ApiError) as closed:
            batcher.submit(["late"])
        return error.value, fine, closed.value

    error, fine, closed = run(main())
    assert (error.status, error.message) == (500, "Cannot translate text: RuntimeError") and fine == [["ok"]]
    assert (closed.status, closed.message) == (503, "The server is shutting down")


def test_api_keys_are_read_one_a_line_and_checked(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("# comment\n\n  alpha  \nbeta\n", encoding="utf-8")
    keys = ApiKeys.from_file(path)
    keys.check("alpha")
    keys.check("beta")
    for given, status in (("gamma", 403), ("alph", 403), ("", 400), (None, 400), (["alpha"], 403)):
        with pytest.raises(ApiError) as refused:
            keys.check(given)
        assert refused.value.status == status
    ApiKeys.from_file(None).check(None)  # no file: no key needed
    path.write_text("two words\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"keys.txt line 1: an API key has no spaces inside"):
        ApiKeys.from_file(path)
    path.write_text("# only a comment\n", encoding="utf-8")
    with pytest.raises(ValueError, match="holds no API key"):
        ApiKeys.from_file(path)


def test_form_fields_make_a_list_of_a_repeated_q_and_parse_translate_reads_libretranslates_fields():
    fields = form_fields([("q", "a"), ("q", "b"), ("source", "de"), ("target", "en"), ("alternatives", "2")])
    assert fields == {"q": ["a", "b"], "source": "de", "target": "en", "alternatives": "2"}
    parsed = parse_translate(fields)
    assert (parsed.texts, parsed.batch, parsed.format, parsed.alternatives) == (["a", "b"], True, "text", 2)
    assert parse_translate({"q": "a", "source": "de", "target": "en", "format": "html"}).batch is False
    for bad in ({"q": "a", "source": "de", "target": "en", "alternatives": 1.5}, {"q": "a", "source": 3}):
        with pytest.raises(ApiError):
            parse_translate(bad)
