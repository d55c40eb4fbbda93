"""Tests of loading a parallel corpus (hf_bahdanau.data: corpora, readers, cleaning, splitting, tokenized): readers,
splits, filters, errors, named corpora and tokenization of splits."""

from __future__ import annotations

import gzip
import hashlib
import json

import datasets
import pytest

from hf_bahdanau.data import cache as corpus_cache
from hf_bahdanau.data.cleaning import normalize_d2l
from hf_bahdanau.data.corpora import load_parallel_corpus
from hf_bahdanau.data.tokenization import train_tokenizer
from hf_bahdanau.data.tokenized import tokenize_corpus


def _write_folder(folder, files: dict[str, list[str]]) -> None:
    folder.mkdir(exist_ok=True)
    for name, lines in files.items():
        text = "".join(line + "\n" for line in lines).encode("utf-8")
        (folder / name).write_bytes(gzip.compress(text) if name.endswith(".gz") else text)


def _pairs(split, src: str, tgt: str) -> list[tuple[str, str]]:
    return [(row[src], row[tgt]) for row in split["translation"]]


@pytest.mark.slow  # reads all of Multi30k de-en
def test_multi30k_folder_splits_and_alignment(multi30k_dir):
    corpus = load_parallel_corpus(multi30k_dir, "de", "en")
    assert {name: len(split) for name, split in corpus.items()} == {
        "train": 29000,
        "validation": 1014,
        "test": 1000,
    }
    with gzip.open(multi30k_dir / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        last_de = f.read().splitlines()[-1].strip()
    assert corpus["test"][-1]["translation"]["de"] == last_de
    assert set(corpus["train"][0]["translation"]) == {"de", "en"}


@pytest.mark.slow  # reads all of Multi30k en-fr, twice
def test_named_corpus_reads_data_dir(multi30k_dir, monkeypatch):
    monkeypatch.setenv(corpus_cache.DATA_DIR_ENV, str(multi30k_dir.parent))
    monkeypatch.setattr(corpus_cache, "_download", _no_network)
    by_name = load_parallel_corpus("multi30k", "en", "fr", max_pairs=5)
    by_path = load_parallel_corpus(multi30k_dir, "en", "fr", max_pairs=5)
    assert by_name["validation"]["translation"] == by_path["validation"]["translation"]


def _no_network(url, target):
    raise OSError(f"network is off in tests ({url})")


def test_named_corpus_offline_error(tmp_path, monkeypatch):
    monkeypatch.setenv(corpus_cache.DATA_DIR_ENV, str(tmp_path / "empty"))
    monkeypatch.setenv(corpus_cache.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(corpus_cache, "_download", _no_network)
    with pytest.raises(ConnectionError, match="HF_BAHDANAU_DATA_DIR") as err:
        load_parallel_corpus("tatoeba-fra-eng", "en", "fr")
    assert isinstance(err.value, OSError)  # the CLI reports OSErrors without a traceback
    assert "fra-eng.zip" in str(err.value)


def test_failed_download_leaves_no_partial_file_or_empty_folder(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv(corpus_cache.DATA_DIR_ENV, str(tmp_path / "empty"))
    monkeypatch.setenv(corpus_cache.CACHE_DIR_ENV, str(cache))
    fetched = []

    def cut_off_after_one_file(url, target):
        if fetched:  # the connection drops after the first bytes of the second file
            corpus_cache._part_file(target).write_bytes(b"\x1f\x8b")
            raise OSError("connection reset")
        fetched.append(target.name)
        target.write_bytes(b"complete")

    monkeypatch.setattr(corpus_cache, "_download", cut_off_after_one_file)
    with pytest.raises(ConnectionError, match="connection reset"):
        load_parallel_corpus("multi30k", "de", "en")
    assert sorted(path.name for path in (cache / "multi30k").iterdir()) == fetched  # complete files stay, no .part
    fetched.append("the first file failed too")
    with pytest.raises(ConnectionError, match="connection reset"):
        load_parallel_corpus("tatoeba-fra-eng", "en", "fr")
    assert sorted(path.name for path in cache.iterdir()) == ["multi30k"]  # no empty tatoeba-fra-eng folder
    (cache / "multi30k" / fetched[0]).unlink()
    with pytest.raises(ConnectionError):
        load_parallel_corpus("multi30k", "de", "en")
    assert not list((cache / "multi30k").iterdir())  # an existing folder is left, emptied of partial files
    monkeypatch.setenv(corpus_cache.CACHE_DIR_ENV, str(tmp_path / "new" / "cache"))
    with pytest.raises(ConnectionError):
        load_parallel_corpus("multi30k", "de", "en")
    assert not (tmp_path / "new").exists()  # nor the cache folders made for the failed download


def test_download_verifies_pinned_checksum(tmp_path, monkeypatch):
    payload = b"train\n"
    good = corpus_cache._RemoteFile("https://example.invalid/a", hashlib.sha256(payload).hexdigest())
    bad = corpus_cache._RemoteFile("https://example.invalid/b", "0" * 64)
    monkeypatch.setenv(corpus_cache.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(corpus_cache, "_download", lambda url, target: target.write_bytes(payload))
    monkeypatch.setitem(corpus_cache.NAMED_CORPORA, "fake", {"a.txt": good})
    assert (corpus_cache.resolve_corpus("fake") / "a.txt").read_bytes() == payload
    monkeypatch.setitem(corpus_cache.NAMED_CORPORA, "fake", {"b.txt": bad})
    with pytest.raises(ValueError, match="checksum mismatch"):
        corpus_cache.resolve_corpus("fake")
    assert not (tmp_path / "fake" / "b.txt").exists()


@pytest.mark.slow  # reads all of Tatoeba (76,036 pairs)
def test_tatoeba_split_is_grouped_seeded_and_complete(tatoeba_tsv):
    corpus = load_parallel_corpus(tatoeba_tsv, "en", "fr")
    sizes = {name: len(split) for name, split in corpus.items()}
    assert sum(sizes.values()) == 76036
    assert 0.88 < sizes["train"] / 76036 < 0.92
    sources = {name: {row["en"] for row in split["translation"]} for name, split in corpus.items()}
    assert not sources["train"] & sources["validation"]
    assert not sources["train"] & sources["test"]
    assert not sources["validation"] & sources["test"]
    again = load_parallel_corpus(tatoeba_tsv, "en", "fr", max_pairs=50)
    other_seed = load_parallel_corpus(tatoeba_tsv, "en", "fr", max_pairs=50, seed=1)
    assert again["test"]["translation"] == corpus["test"]["translation"][:50]
    assert other_seed["test"]["translation"] != again["test"]["translation"]


@pytest.mark.slow  # reads all of Tatoeba (76,036 pairs)
def test_tatoeba_splits_are_shuffled(tatoeba_tsv):
    """The TSV is sorted by length; the first pairs of a split must be a sample, not the shortest ones."""
    corpus = load_parallel_corpus(tatoeba_tsv, "en", "fr", seed=3)
    lengths = [len(row["en"].split()) for row in corpus["validation"]["translation"]]
    first, overall = lengths[:50], sum(lengths) / len(lengths)
    assert abs(sum(first) / 50 - overall) < 1.0  # 5.0 words against 4.6; file order gives 2.1
    assert max(first) > sorted(lengths)[len(lengths) // 2]  # not all among the shorter half (file order: 3 < 5)
    again = load_parallel_corpus(tatoeba_tsv, "en", "fr", seed=3, max_pairs=50)
    assert again["validation"]["translation"] == corpus["validation"]["translation"][:50]
    sources = {name: {row["en"] for row in split["translation"]} for name, split in corpus.items()}
    assert not sources["train"] & sources["validation"] and not sources["validation"] & sources["test"]
    assert not sources["train"] & sources["test"]


def test_folder_splits_keep_file_order(tmp_path):
    folder = tmp_path / "corpus"
    lines = [f"line {i}" for i in range(30)]
    _write_folder(folder, {"train.en": lines, "train.fr": lines, "val.en": lines, "val.fr": lines})
    corpus = load_parallel_corpus(folder, "en", "fr", test_split="val", seed=5)
    assert [row["en"] for row in corpus["train"]["translation"]] == lines
    assert [row["fr"] for row in corpus["test"]["translation"]] == lines


def test_tsv_columns(tmp_path):
    tsv = tmp_path / "fra-eng.tsv"
    tsv.write_text("Go.\tVa !\tCC-BY 2.0 (France) Attribution: tatoeba.org\nHi.\tSalut !\tCC-BY\n", "utf-8")
    corpus = load_parallel_corpus(tsv, "fr", "en", split_ratios=(1, 0, 0))
    assert sorted(_pairs(corpus["train"], "fr", "en")) == [("Salut !", "Hi."), ("Va !", "Go.")]
    swapped = load_parallel_corpus(tsv, "en", "fr", columns=("fr", "en"), split_ratios=(1, 0, 0))
    assert sorted(_pairs(swapped["train"], "en", "fr")) == [("Salut !", "Hi."), ("Va !", "Go.")]
    with pytest.raises(ValueError, match=r"'de' not in .*fra-eng.tsv.*\['en', 'fr'\]"):
        load_parallel_corpus(tsv, "en", "de")


def test_json_lines_and_csv(tmp_path):
    jsonl = tmp_path / "pairs.jsonl"
    rows = [{"translation": {"en": "a cat", "de": "eine Katze"}}, {"en": "a dog", "de": "ein Hund"}]
    jsonl.write_text("\n".join(json.dumps(row) for row in rows), "utf-8")
    corpus = load_parallel_corpus(jsonl, "en", "de", split_ratios=(1, 0, 0))
    assert sorted(_pairs(corpus["train"], "en", "de")) == [("a cat", "eine Katze"), ("a dog", "ein Hund")]
    csv_file = tmp_path / "pairs.csv"
    csv_file.write_text('de,en\neine Katze,a cat\n"ein Hund, braun","a dog, brown"\n', "utf-8")
    corpus = load_parallel_corpus(csv_file, "en", "de", split_ratios=(1, 0, 0))
    assert sorted(_pairs(corpus["train"], "en", "de")) == [
        ("a cat", "eine Katze"),
        ("a dog, brown", "ein Hund, braun"),
    ]
    with pytest.raises(
        ValueError, match=r"line 1 \(header\): needs languages 'en' and 'fr'; languages available: \['de', 'en'\]"
    ):
        load_parallel_corpus(csv_file, "en", "fr")


def test_csv_rows_must_have_every_field_and_may_span_lines(tmp_path):
    csv_file = tmp_path / "pairs.csv"
    csv_file.write_text('de,en\n"Ein Hund\nrennt","A dog\r\nruns"\n\nKatze,cat\n', "utf-8", newline="")
    corpus = load_parallel_corpus(csv_file, "de", "en", split_ratios=(1, 0, 0))
    assert sorted(_pairs(corpus["train"], "de", "en")) == [("Ein Hund\nrennt", "A dog\r\nruns"), ("Katze", "cat")]
    csv_file.write_text('de,en\n"Ein Hund\nrennt",A dog runs\nnur deutsch\nKatze,cat\n', "utf-8")
    with pytest.raises(ValueError, match=r"pairs.csv: line 4 has 1 comma-separated fields, the header 2"):
        load_parallel_corpus(csv_file, "de", "en")
    csv_file.write_text("de,en\nKatze,cat\nein Hund, braun,a dog\n", "utf-8")  # an unquoted comma
    with pytest.raises(ValueError, match=r"pairs.csv: line 3 has 3 comma-separated fields, the header 2"):
        load_parallel_corpus(csv_file, "de", "en")


def test_json_file_may_hold_one_array(tmp_path):
    rows = [{"translation": {"en": "a cat", "de": "eine Katze"}}, {"en": "a dog", "de": "ein Hund"}]
    json_file = tmp_path / "pairs.json"
    json_file.write_text("\n" + json.dumps(rows, indent=2), "utf-8")
    corpus = load_parallel_corpus(json_file, "en", "de", split_ratios=(1, 0, 0))
    assert sorted(_pairs(corpus["train"], "en", "de")) == [("a cat", "eine Katze"), ("a dog", "ein Hund")]
    json_file.write_text(json.dumps([rows[0], ["a dog", "ein Hund"]]), "utf-8")
    with pytest.raises(ValueError, match=r"pairs.json: JSON array item 2: expected an object of languages"):
        load_parallel_corpus(json_file, "en", "de")
    json_file.write_text('[\n  {"en": "a", "de": "b"},\n  {"en": "c" "de": "d"}\n]', "utf-8")
    with pytest.raises(ValueError, match=r"pairs.json: line 3 is not valid JSON .*one JSON array of objects"):
        load_parallel_corpus(json_file, "en", "de")
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text('{"en": "a", "de": "b"}\n["c", "d"]\n', "utf-8")  # valid JSON, but not an object
    with pytest.raises(ValueError, match=r"pairs.jsonl: line 2: expected an object of languages"):
        load_parallel_corpus(jsonl, "en", "de")


def test_byte_order_mark_is_not_part_of_the_first_sentence(tmp_path):
    bom = "\ufeff"
    files = {
        "pairs.tsv": "Go.\tVa !\n",
        "pairs.csv": "en,fr\nGo.,Va !\n",
        "pairs.jsonl": '{"en": "Go.", "fr": "Va !"}\n',
        "pairs.json": '[{"en": "Go.", "fr": "Va !"}]',
    }
    for name, text in files.items():
        (tmp_path / name).write_text(bom + text, "utf-8")
        corpus = load_parallel_corpus(tmp_path / name, "en", "fr", split_ratios=(1, 0, 0))
        assert _pairs(corpus["train"], "en", "fr") == [("Go.", "Va !")], name
    folder = tmp_path / "corpus"
    _write_folder(folder, {"train.en": [bom + "Go."], "train.fr": [bom + "Va !"], "test.en": ["a"], "test.fr": ["b"]})
    corpus = load_parallel_corpus(folder, "en", "fr", test_split="test")
    assert _pairs(corpus["train"], "en", "fr") == [("Go.", "Va !")]


def test_folder_errors(tmp_path):
    folder = tmp_path / "corpus"
    files = {
        "train.en": ["a", "b", "c"],
        "train.de": ["x", "y"],
        "test.en.gz": ["t", "u"],
        "test.de.gz": ["v", "w"],
    }
    _write_folder(folder, files)
    with pytest.raises(ValueError, match=r"train.de has 2 lines, .*train.en has 3") as err:
        load_parallel_corpus(folder, "de", "en", test_split="test")
    assert "parallel files differ in length" in str(err.value)
    _write_folder(folder, {"train.de": ["x", "y", "z"]})
    (folder / "test.de.gz").write_bytes(gzip.compress(b"ok\n\xff\xfe\n"))
    with pytest.raises(ValueError, match=r"test.de.gz: line 2 is not valid UTF-8"):
        load_parallel_corpus(folder, "de", "en", test_split="test")
    with pytest.raises(FileNotFoundError, match=r"no test.fr\[.gz\] .*languages available: \['de', 'en'\]"):
        load_parallel_corpus(folder, "fr", "en", test_split="test")
    with pytest.raises(FileNotFoundError, match=r"no test split 'test_2016_flickr' .*\['test', 'train'\]"):
        load_parallel_corpus(folder, "de", "en")
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        load_parallel_corpus(tmp_path / "missing.tsv", "de", "en")


def test_filters_and_normalisation(tmp_path):
    folder = tmp_path / "corpus"
    src = ["Hello, World!", "  ", "one two three four five", "Non\u202fbreak.", "x"]
    tgt = ["Bonjour, monde !", "vide", "un deux", "Insécable\xa0!", "y"]
    _write_folder(folder, {"train.en": src, "train.fr": tgt, "test.en": src, "test.fr": tgt})
    corpus = load_parallel_corpus(folder, "en", "fr", test_split="test", normalize=True, max_length=4)
    assert _pairs(corpus["train"], "en", "fr") == [
        ("hello , world !", "bonjour , monde !"),
        ("non break .", "insécable !"),
        ("x", "y"),
    ]
    kept = load_parallel_corpus(folder, "en", "fr", test_split="test", drop_empty=False, max_pairs=2)
    assert _pairs(kept["test"], "en", "fr") == [("Hello, World!", "Bonjour, monde !"), ("", "vide")]
    with pytest.raises(ValueError, match="no training pair left"):
        load_parallel_corpus(folder, "en", "fr", test_split="test", max_length=0)


def test_normalize_d2l_matches_d2l_examples():
    # d2l's preprocess_nmt output for the first Tatoeba lines: "go .\tva !", "run !\tcours !".
    assert normalize_d2l("Go.") == "go ."
    assert normalize_d2l("Cours\u202f!") == "cours !"
    assert normalize_d2l("Wait... Hi,you") == "wait . . . hi ,you"
    assert normalize_d2l(".Hi") == ".hi"


@pytest.mark.slow  # reads all of Multi30k en-fr
def test_tokenize_corpus_counts_truncation(multi30k_dir):
    corpus = load_parallel_corpus(multi30k_dir, "en", "fr", max_pairs=200)
    tokenizer = train_tokenizer(corpus, 500, languages=["en", "fr"])
    tokenized, stats = tokenize_corpus(corpus, tokenizer, "en", "fr", max_source_length=12, max_target_length=16)
    assert set(tokenized["train"].column_names) == {"input_ids", "attention_mask", "labels"}
    full_src = tokenizer([row["en"] for row in corpus["train"]["translation"]])["input_ids"]
    full_tgt = tokenizer([row["fr"] for row in corpus["train"]["translation"]])["input_ids"]
    expected_src = sum(len(ids) > 12 for ids in full_src)
    expected_pairs = sum(len(s) > 12 or len(t) > 16 for s, t in zip(full_src, full_tgt, strict=True))
    assert stats["train"].truncated_source == expected_src > 0
    assert stats["train"].truncated_pairs == expected_pairs
    assert stats["train"].pairs == 200
    row = tokenized["train"][0]
    assert len(row["input_ids"]) <= 12 and len(row["labels"]) <= 16
    assert row["input_ids"][-1] == row["labels"][-1] == tokenizer.eos_token_id
    assert row["attention_mask"] == [1] * len(row["input_ids"])
    short = next(i for i, ids in enumerate(full_src) if len(ids) <= 12)
    assert tokenized["train"][short]["input_ids"] == full_src[short]
    reverse, _ = tokenize_corpus(corpus, tokenizer, "fr", "en", max_source_length=64, max_target_length=64)
    assert reverse["validation"][0]["input_ids"] == tokenizer(corpus["validation"][0]["translation"]["fr"])["input_ids"]


def test_hub_name_goes_to_load_dataset(monkeypatch):
    rows = [{"translation": {"de": f"satz {i}", "en": f"sentence {i}"}} for i in range(40)]
    calls = []

    def fake_load_dataset(name, config):
        calls.append((name, config))
        return datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    corpus = load_parallel_corpus("someone/de-en-pairs", "de", "en", hub_config="de-en", split_ratios=(0.5, 0.25, 0.25))
    assert calls == [("someone/de-en-pairs", "de-en")]
    assert {name: len(split) for name, split in corpus.items()} == {"train": 20, "validation": 10, "test": 10}
    assert sorted(row["en"] for split in corpus.values() for row in split["translation"]) == sorted(
        row["translation"]["en"] for row in rows
    )


@pytest.mark.parametrize("hub_error", [ConnectionError, datasets.exceptions.DatasetNotFoundError])
def test_unknown_corpus_name_lists_the_known_ones(monkeypatch, hub_error):
    def fake_load_dataset(name, config):
        raise hub_error(f"Couldn't reach {name!r} on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError) as err:  # the CLI reports OSErrors in one line
        load_parallel_corpus("multi31k", "de", "en")
    message = str(err.value)
    assert "(named corpora: multi30k, tatoeba-fra-eng; did you mean 'multi30k'?" in message
    assert (
        "from the Hub failed (offline mode is on: HF_HUB_OFFLINE)" in message
        and "Couldn't reach 'multi31k' on the Hub" in message
    )
    assert isinstance(err.value, ConnectionError) == (hub_error is ConnectionError)


def test_every_file_format_lands_in_arrow_through_a_builder(tmp_path):
    """Folders, TSV, CSV and JSON lines are read by `datasets`' builders into cache files, not Python lists."""
    folder = tmp_path / "corpus"
    lines = [f"satz {i}" for i in range(8)]
    _write_folder(folder, {"train.de.gz": lines, "train.en": lines, "test.de": lines[:2], "test.en": lines[:2]})
    (tmp_path / "pairs.tsv").write_text("".join(f"{x}\t{x}!\n" for x in lines), "utf-8")
    (tmp_path / "pairs.csv").write_text("de,en\n" + "".join(f"{x},{x}!\n" for x in lines), "utf-8")
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps({"de": x, "en": x + "!"}) + "\n" for x in lines), "utf-8")
    datasets_cache = datasets.config.HF_DATASETS_CACHE
    for source in (folder, *(tmp_path / f"pairs.{ext}" for ext in ("tsv", "csv", "jsonl"))):
        corpus = load_parallel_corpus(source, "de", "en", test_split="test", split_ratios=(1, 0, 0))
        files = corpus["train"].cache_files
        assert files and all(str(datasets_cache) in file["filename"] for file in files), source  # memory-mapped
        assert sorted(row["de"] for row in corpus["train"]["translation"]) == lines, source


def test_second_tokenization_reads_the_cache(tmp_path, monkeypatch):
    folder = tmp_path / "corpus"
    lines = [f"a small sentence number {i}" for i in range(40)]
    _write_folder(folder, {"train.de": lines, "train.en": lines[::-1], "test.de": lines[:5], "test.en": lines[:5]})
    corpus = load_parallel_corpus(folder, "de", "en", test_split="test")
    tokenizer = train_tokenizer(corpus, 60, languages=["de", "en"])
    first, _ = tokenize_corpus(corpus, tokenizer, "de", "en", max_source_length=5, max_target_length=5)
    long_sources = sum(len(tokenizer(x)["input_ids"]) > 5 for x in lines)
    calls = []
    original = type(tokenizer).__call__
    monkeypatch.setattr(type(tokenizer), "__call__", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    reloaded = load_parallel_corpus(folder, "de", "en", test_split="test")
    again, stats = tokenize_corpus(reloaded, tokenizer, "de", "en", max_source_length=5, max_target_length=5)
    assert calls == []  # read back from the cache: not tokenized again
    assert again["train"].cache_files == first["train"].cache_files
    assert again["train"]["input_ids"] == first["train"]["input_ids"] and stats["train"].pairs == 40
    assert stats["train"].truncated_source == long_sources > 0  # the counts come from the cached columns
    other = train_tokenizer(corpus, 50, languages=["de", "en"])  # another vocabulary: tokenized anew
    calls.clear()
    tokenize_corpus(corpus, other, "de", "en", max_source_length=5, max_target_length=5)
    assert calls


def test_tokenizer_trains_on_a_sample_of_a_large_corpus(monkeypatch):
    from hf_bahdanau.data import tokenization
    from hf_bahdanau.training.assembly import load_or_train_tokenizer
    from hf_bahdanau.training.options import TokenizerArguments

    rows = [{"translation": {"de": f"w{i}", "en": f"v{i}"}} for i in range(30)]
    corpus = datasets.Dataset.from_list(rows)
    sample = tokenization.sample_pairs(corpus, 10, seed=0)
    assert len(sample) == 10 and sample["translation"] == tokenization.sample_pairs(corpus, 10, seed=0)["translation"]
    word = train_tokenizer(corpus, None, model="word", min_freq=1, max_samples=10)
    assert len(word) == 4 + 20  # the specials and the two words of each of 10 pairs
    assert len(train_tokenizer(corpus, None, model="word", min_freq=1)) == 4 + 60  # a small corpus: all of it
    monkeypatch.setattr(tokenization, "DEFAULT_TRAIN_SAMPLES", 7)  # above the threshold: a sample by default
    assert len(train_tokenizer(corpus, None, model="word", min_freq=1)) == 4 + 14
    args = TokenizerArguments(tokenizer_type="word", vocab_size=1000, min_freq=1, tokenizer_train_samples=3)
    assert len(load_or_train_tokenizer(args, None, datasets.DatasetDict({"train": corpus}), "unused", False)) == 4 + 6
    with pytest.raises(ValueError, match="tokenizer_train_samples must be a positive number of pairs, got 0"):
        train_tokenizer(corpus, None, model="word", max_samples=0)


def test_length_grouping_reads_the_lengths_from_arrow():
    from hf_bahdanau.training.trainer import arrow_lengths

    rows = datasets.Dataset.from_dict({"input_ids": [[7] * (n % 5 + 1) for n in range(12)]})
    chosen = rows.select([9, 2, 4, 4])
    assert arrow_lengths(rows, "input_ids") == [len(ids) for ids in rows["input_ids"]]
    assert arrow_lengths(chosen, "input_ids") == [len(ids) for ids in chosen["input_ids"]] == [5, 3, 5, 5]
