"""The distillation cache shared and damaged: two runs on one key at once both get the translations (the second waits
and reuses them), a damaged chunk is translated again, a damaged or partly deleted dataset is made again, an
unwritable cache is a one-line error."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import datasets
import pytest

from hf_bahdanau.errors import InputError
from hf_bahdanau.training.distillation import Decoding, teacher_translations

SOURCES = [f"Satz Nummer {number}." for number in range(6)]
DECODING = Decoding(engine="torch", num_beams=2, max_new_tokens=8, batch_size=4)


def shout(texts: list[str]) -> list[str]:
    """A stand-in teacher: each source upper-cased."""
    return [text.upper() for text in texts]


@pytest.fixture
def teacher(tmp_path: Path) -> Path:
    """A folder with what the cache key reads of a teacher (its config)."""
    folder = tmp_path / "teacher"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bahdanau"}', encoding="utf-8")
    return folder


@pytest.fixture
def pairs() -> datasets.Dataset:
    return datasets.Dataset.from_dict({"translation": [{"de": text, "en": text.lower()} for text in SOURCES]})


def translations(teacher: Path, pairs: datasets.Dataset, cache: Path, calls: list[int], **options):
    """`teacher_translations` in chunks of 2 with `shout`, recording the sentences of each call in `calls`."""

    def translate(texts: list[str]) -> list[str]:
        calls.append(len(texts))
        return shout(texts)

    return teacher_translations(teacher, pairs, "de", "en", DECODING, cache, translate=translate, chunk_size=2,
                                **options)  # fmt: skip


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def test_two_runs_on_one_cache_at_once_both_get_the_translations(teacher, pairs, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="hf_bahdanau")
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []
    found, errors = {}, []

    def held(texts: list[str]) -> list[str]:  # the first run's teacher, held in its first chunk
        started.set()
        assert release.wait(60)
        return shout(texts)

    def run(name: str, translate) -> None:
        try:
            found[name] = teacher_translations(teacher, pairs, "de", "en", DECODING, tmp_path, translate=translate,
                                               chunk_size=2)  # fmt: skip
        except BaseException as error:  # noqa: BLE001 - the test reports it
            errors.append(error)

    first = threading.Thread(target=run, args=("first", held))
    first.start()
    assert started.wait(60)
    second = threading.Thread(target=run, args=("second", lambda texts: calls.append(len(texts)) or shout(texts)))
    second.start()
    deadline = time.monotonic() + 60
    while second.is_alive() and not any("waiting for it" in m for m in messages(caplog)):
        assert time.monotonic() < deadline
        second.join(0.02)
    release.set()
    first.join(60)
    second.join(60)
    assert not first.is_alive() and not second.is_alive() and not errors, errors
    assert found["first"].dataset["translation"] == found["second"].dataset["translation"] == shout(SOURCES)
    assert calls == [], "the second run translated too"
    assert found["second"].info == found["first"].info


@pytest.mark.parametrize("damage", ["info.json deleted", "info.json not JSON", "arrow file cut short", "dataset gone"])
def test_a_damaged_or_partly_deleted_cache_is_made_again(teacher, pairs, tmp_path, caplog, damage):
    calls: list[int] = []
    folder = translations(teacher, pairs, tmp_path, calls).folder
    if damage == "info.json deleted":
        (folder / "info.json").unlink()
    elif damage == "info.json not JSON":
        (folder / "info.json").write_text("{not json", encoding="utf-8")
    elif damage == "arrow file cut short":
        (arrow,) = (folder / "dataset").glob("*.arrow")
        arrow.write_bytes(arrow.read_bytes()[: arrow.stat().st_size // 2])
    else:
        for path in (folder / "dataset").iterdir():
            path.unlink()
        (folder / "dataset").rmdir()
    again = translations(teacher, pairs, tmp_path, calls)
    assert again.dataset["translation"] == shout(SOURCES) and calls == [2, 2, 2, 2, 2, 2]
    said = any(f"the cached translations in {folder} cannot be read" in m for m in messages(caplog))
    assert said is (damage != "dataset gone")
    assert translations(teacher, pairs, tmp_path, calls).info == again.info and len(calls) == 6  # reused now


def test_a_damaged_chunk_is_translated_again(teacher, pairs, tmp_path, caplog):
    calls: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        translations(teacher, pairs, tmp_path, calls, stop_after=2)
    (chunks,) = [path for path in tmp_path.glob("*/chunks-of-2")]
    (arrow,) = (chunks / "00001").glob("*.arrow")
    arrow.write_bytes(arrow.read_bytes()[:40])
    (chunks / ".00002.writing-x1y2").mkdir()  # what a run killed while writing chunk 2 leaves
    resumed = translations(teacher, pairs, tmp_path, calls)
    assert calls == [2, 2, 2, 2]  # chunks 1 and 2 again
    assert resumed.dataset["translation"] == shout(SOURCES)
    assert any(m.startswith(f"recomputing chunk 1: {chunks / '00001'} cannot be read") for m in messages(caplog))
    assert sorted(path.name for path in resumed.folder.iterdir()) == ["dataset", "info.json"]


def test_an_unwritable_cache_is_a_one_line_error(teacher, pairs, tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(InputError, match=r"^the distillation cache .*file/cache cannot be written \(Not a directory\)"):
        translations(teacher, pairs, tmp_path / "file" / "cache", [])
