"""Sequence-level knowledge distillation's data (Kim and Rush 2016): the teacher's translations of a training corpus.

The teacher translates every source sentence of the train split (beam 5 by default) and the student learns from
those translations. They are cached as a `datasets.Dataset` on disk (columns `source`, `translation`, `reference`)
under a key made of a fingerprint of the teacher folder's model and tokenizer files, a hash of the source sentences
and the decoding settings: the same key reuses it, anything else translates anew. The translation is written in
chunks; an interrupted one resumes from the chunks already written. `info.json` beside the dataset records its disk
size and the teacher's translation time. The cache's folders, its lock and its repairs: `distillation_cache`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import datasets

from hf_bahdanau.data.cache import CACHE_DIR_ENV
from hf_bahdanau.json_files import read_json

from . import distillation_cache
from .distillation_cache import DATASET_FOLDER

logger = logging.getLogger(__name__)

CHUNK_SIZE = 2000  # sentences a chunk: what an interruption can lose

Translate = Callable[[Sequence[str]], list[str]]


@dataclass(frozen=True)
class Decoding:
    """How the teacher translates: the engine, beams, longest translation (None: the teacher's) and batch size."""

    engine: str = "torch"
    num_beams: int = 5
    max_new_tokens: int | None = None
    batch_size: int = 32


def default_cache_root() -> Path:
    """`$HF_BAHDANAU_CACHE/distillation` (`~/.cache/hf_bahdanau/distillation`)."""
    return Path(os.environ.get(CACHE_DIR_ENV, Path.home() / ".cache" / "hf_bahdanau")) / "distillation"


def default_engine(teacher: str | Path) -> str:
    """CTranslate2 for a Transformer teacher when the engine is installed, else torch."""
    config = read_json(Path(teacher) / "config.json")
    transformer = config.get("model_type") == "d2l_transformer"
    return "ctranslate2" if transformer and importlib.util.find_spec("ctranslate2") else "torch"


def teacher_fingerprint(teacher: str | Path) -> str:
    """A hash of what decides the teacher's translations: its config, weights and tokenizer (the fingerprint of its
    CTranslate2 export) and its generation config; not its card, scores, hypotheses or exports."""
    from hf_bahdanau.decoding.export.folders import source_fingerprint

    generation = Path(teacher) / "generation_config.json"
    settings = generation.read_bytes() if generation.is_file() else b""
    return hashlib.sha256(source_fingerprint(teacher).encode("utf-8") + b"\0" + settings).hexdigest()[:16]


def sources_hash(sources: Sequence[str]) -> str:
    """A hash of the source sentences, in order: the corpus as the teacher reads it."""
    digest = hashlib.sha256()
    for text in sources:
        digest.update(text.encode("utf-8") + b"\n")
    return digest.hexdigest()[:16]


def cache_key(teacher_hash: str, corpus_hash: str, decoding: Decoding) -> str:
    """The cache folder's name for a teacher, a corpus and decoding settings."""
    settings = json.dumps({"teacher": teacher_hash, "corpus": corpus_hash, **asdict(decoding)}, sort_keys=True)
    return hashlib.sha256(settings.encode("utf-8")).hexdigest()[:20]


def teacher_translator(teacher: str | Path, decoding: Decoding) -> Translate:
    """The teacher's translation function: the `Translator` that `hf-bahdanau translate` uses, with `decoding`."""
    from hf_bahdanau.decoding.translator import Translator

    translator = Translator.from_folder(teacher, engine=decoding.engine, batch_size=decoding.batch_size)
    generation = {"num_beams": decoding.num_beams}
    if decoding.max_new_tokens is not None:
        generation["max_new_tokens"] = decoding.max_new_tokens
    return lambda texts: [found.text for found in translator.translate(texts, **generation)]


def _folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def translate_in_chunks(
    translate: Translate,
    sources: Sequence[str],
    chunks_dir: Path,
    chunk_size: int = CHUNK_SIZE,
    stop_after: int | None = None,
) -> tuple[list[str], float]:
    """Translate `sources` chunk by chunk into `chunks_dir/NNNNN/` (each translation with its share of the chunk's
    seconds), reusing the chunks already there (one that cannot be read is translated again), with a progress bar;
    the translations and the seconds the teacher spent on them. `stop_after`: raise KeyboardInterrupt after
    translating that many chunks (as an interruption)."""
    from tqdm.auto import tqdm

    count = math.ceil(len(sources) / chunk_size)
    done = sum((chunks_dir / f"{number:05d}").is_dir() for number in range(count))
    if done:
        logger.info("resuming the teacher's translation: %d of %d chunks already written", done, count)
    translations: list[str] = []
    seconds = 0.0
    translated = 0
    with tqdm(total=len(sources), desc="teacher translating", unit="sent", disable=None) as bar:  # a terminal only
        for number in range(count):
            folder = chunks_dir / f"{number:05d}"
            texts = list(sources[number * chunk_size : (number + 1) * chunk_size])
            chunk = distillation_cache.read_chunk(folder, number, len(texts))
            if chunk is None:
                if stop_after is not None and translated >= stop_after:
                    raise KeyboardInterrupt(f"stopped after {translated} chunks")
                began = time.perf_counter()
                outputs = translate(texts)
                shares = [(time.perf_counter() - began) / len(texts)] * len(texts)
                distillation_cache.commit(datasets.Dataset.from_dict({"translation": outputs, "seconds": shares}),
                                          folder)  # fmt: skip
                chunk, translated = (outputs, shares), translated + 1
            translations += chunk[0]
            seconds += sum(chunk[1])
            bar.update(len(texts))
    return translations, seconds


@dataclass
class TeacherTranslations:
    """The cached translations and what they cost."""

    dataset: datasets.Dataset  # columns source, translation (the teacher's), reference
    info: dict[str, Any]  # key, teacher, settings, pairs, teacher_seconds, disk_bytes
    folder: Path


def teacher_translations(
    teacher: str | Path,
    pairs: datasets.Dataset,
    src_lang: str,
    tgt_lang: str,
    decoding: Decoding,
    cache_root: str | Path | None = None,
    corpus: str = "",
    translate: Translate | None = None,
    chunk_size: int = CHUNK_SIZE,
    stop_after: int | None = None,
) -> TeacherTranslations:
    """The teacher's translations of the sources of `pairs` (translation format), from the cache or translated now
    (`translate`: the teacher's translation function, default `teacher_translator`)."""
    sources = [row[src_lang] for row in pairs["translation"]]
    references = [row[tgt_lang] for row in pairs["translation"]]
    teacher_hash = teacher_fingerprint(teacher)
    key = cache_key(teacher_hash, sources_hash(sources), decoding)
    folder = Path(cache_root or default_cache_root()) / key
    with distillation_cache.locked(folder):  # a second run on this key waits, then finds the translations
        if (found := distillation_cache.read_translations(folder, key, len(sources))) is not None:
            logger.info("the teacher's translations, from the cache: %s", folder / DATASET_FOLDER)
            shutil.rmtree(folder / f"chunks-of-{chunk_size}", ignore_errors=True)  # left by a run cut off at its end
            return TeacherTranslations(*found, folder)
        logger.info("the teacher translates %d sentences (%s, beam %d) into %s", len(sources), decoding.engine,
                    decoding.num_beams, folder)  # fmt: skip
        translate = translate or teacher_translator(teacher, decoding)
        chunks_dir = folder / f"chunks-of-{chunk_size}"
        outputs, seconds = translate_in_chunks(translate, sources, chunks_dir, chunk_size, stop_after)
        rows = {"source": sources, "translation": outputs, "reference": references}
        dataset_dir = folder / DATASET_FOLDER
        distillation_cache.commit(datasets.Dataset.from_dict(rows), dataset_dir)
        info = {
            "key": key,
            "teacher": str(Path(teacher).resolve()),
            "teacher_fingerprint": teacher_hash,
            "corpus": corpus,
            "languages": [src_lang, tgt_lang],
            **asdict(decoding),
            "pairs": len(sources),
            "teacher_seconds": round(seconds, 3),
            "disk_bytes": _folder_bytes(dataset_dir),
        }
        distillation_cache.write_info(folder, info)  # (cut off before it: the next run remakes the dataset from chunks)
        shutil.rmtree(chunks_dir)
    logger.info("%d translations in %.0f s, %.1f MB on disk", len(sources), seconds, info["disk_bytes"] / 1e6)
    return TeacherTranslations(datasets.load_from_disk(str(dataset_dir)), info, folder)


def student_pairs(
    translations: datasets.Dataset, src_lang: str, tgt_lang: str, mix_references: bool = False
) -> datasets.Dataset:
    """The student's train pairs in the translation format: each source with the teacher's translation (empty ones
    left out), followed with `mix_references` by each source with its reference."""

    def to_rows(batch: dict[str, list[str]], column: str) -> dict[str, list[dict[str, str]]]:
        pairs = zip(batch["source"], batch[column], strict=True)
        return {"translation": [{src_lang: source, tgt_lang: target} for source, target in pairs]}

    features = datasets.Features({"translation": datasets.Translation(languages=[src_lang, tgt_lang])})
    columns = ("translation", "reference") if mix_references else ("translation",)
    parts = [
        translations.filter(lambda row, c=column: bool(row[c].strip())).map(
            to_rows,
            batched=True,
            fn_kwargs={"column": column},
            remove_columns=translations.column_names,
            features=features,
        )  # fmt: skip
        for column in columns
    ]
    return datasets.concatenate_datasets(parts)


__all__ = ["Decoding", "TeacherTranslations", "student_pairs", "teacher_fingerprint", "teacher_translations"]
