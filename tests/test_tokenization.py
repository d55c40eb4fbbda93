"""Tests of hf_bahdanau.data.tokenization: exact round trips, vocabulary size, special ids, targets, speed."""

from __future__ import annotations

import gzip
import json
import logging
import time
import unicodedata
from collections import Counter

import pytest
from transformers import AutoTokenizer

from hf_bahdanau.data.cleaning import normalize_d2l
from hf_bahdanau.data.corpora import load_parallel_corpus
from hf_bahdanau.data.tokenization import train_tokenizer

logger = logging.getLogger(__name__)
SAMPLE = 2000


def _read_gz(path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


@pytest.fixture(scope="module")
def samples(multi30k_dir, tatoeba_tsv) -> dict[str, list[str]]:
    """2,000 lines of each shared corpus and language, after the documented normalisation (NFC, strip)."""
    raw = {f"multi30k.{lang}": _read_gz(multi30k_dir / f"train.{lang}.gz")[:SAMPLE] for lang in ("en", "de", "fr")}
    tatoeba = tatoeba_tsv.read_text("utf-8").splitlines()[::38][:SAMPLE]  # spread over the length-sorted file
    raw["tatoeba.en"] = [line.split("\t")[0] for line in tatoeba]
    raw["tatoeba.fr"] = [line.split("\t")[1] for line in tatoeba]
    return {name: [unicodedata.normalize("NFC", line).strip() for line in lines] for name, lines in raw.items()}


@pytest.mark.slow  # trains two 3,000-token tokenizers on 10,000 corpus lines
@pytest.mark.parametrize("model", ["bpe", "unigram"])
def test_subword_round_trip_is_exact(samples, model):
    texts = [line for lines in samples.values() for line in lines]
    tokenizer = train_tokenizer(texts, 3000, model=model)
    assert len(tokenizer) == 3000
    for name, lines in samples.items():
        encoded = tokenizer(lines)["input_ids"]
        decoded = tokenizer.batch_decode(encoded, skip_special_tokens=True)
        mismatches = [(x, y) for x, y in zip(lines, decoded, strict=True) if x != y]
        assert not mismatches, f"{name}: {len(mismatches)} of {len(lines)} differ, e.g. {mismatches[:3]}"
    assert "\u202f" in "".join(samples["tatoeba.fr"])  # the narrow no-break space survives too


def test_unicode_and_punctuation_spacing():
    texts = ["Die Größe ist gut.", "Un élève , pas deux !", "Ça va? Oui."] * 20
    tokenizer = train_tokenizer(texts, 60, min_freq=1)
    for text in set(texts):
        assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == text


def test_targets_end_in_eos_without_prefix(samples):
    tokenizer = train_tokenizer(samples["multi30k.en"] + samples["multi30k.fr"], 1000)
    src, tgt = samples["multi30k.en"][:8], samples["multi30k.fr"][:8]
    batch = tokenizer(src, text_target=tgt, max_length=10, truncation=True)
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    for labels, text in zip(batch["labels"], tgt, strict=True):
        full = tokenizer(text)["input_ids"]
        assert full[-1] == tokenizer.eos_token_id == 2
        assert tokenizer.bos_token_id not in full
        assert labels == (full if len(full) <= 10 else full[:9] + [2])
    assert all(ids[-1] == 2 and len(ids) <= 10 for ids in batch["input_ids"])


def test_special_ids_survive_save_and_auto_load(samples, tmp_path):
    tokenizer = train_tokenizer(samples["multi30k.de"], 500, model_max_length=256)
    tokenizer.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] in (
        "TokenizersBackend",
        "PreTrainedTokenizerFast",
    )
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    for tok in (tokenizer, reloaded):
        assert [tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id] == [0, 1, 2, 3]
        assert tok.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<s>", "</s>", "<unk>"]
    assert reloaded.model_max_length == 256
    assert reloaded.get_vocab() == tokenizer.get_vocab()
    lines = samples["multi30k.de"][:50]
    assert reloaded(lines)["input_ids"] == tokenizer(lines)["input_ids"]
    assert reloaded.batch_decode(reloaded(lines)["input_ids"], skip_special_tokens=True) == lines


@pytest.mark.slow  # reads and splits all of Tatoeba (76,036 pairs) for 600
def test_word_model_is_d2l_vocabulary(tatoeba_tsv):
    corpus = load_parallel_corpus(tatoeba_tsv, "en", "fr", max_pairs=600)
    tokenizer = train_tokenizer(corpus, None, model="word", min_freq=2)
    words = Counter(
        word for row in corpus["train"]["translation"] for text in row.values() for word in normalize_d2l(text).split()
    )
    expected = {word for word, count in words.items() if count >= 2} | {"<pad>", "<bos>", "<eos>", "<unk>"}
    assert set(tokenizer.get_vocab()) == expected
    assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert (tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token) == (
        "<pad>",
        "<bos>",
        "<eos>",
        "<unk>",
    )
    first, second = [word for word, count in words.most_common() if count >= 2 and word.isalpha()][:2]
    text = f"{first.capitalize()}. {second.upper()}\u202f!"  # d2l normalisation: lowercase, spaces, no-break space
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == [first, ".", second, "!", "<eos>"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == normalize_d2l(text).replace("  ", " ")
    assert tokenizer.convert_ids_to_tokens(tokenizer("zyzzyva")["input_ids"]) == ["<unk>", "<eos>"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown tokenizer model 'wordpiece'"):
        train_tokenizer(["a b"], 100, model="wordpiece")
    with pytest.raises(TypeError, match="not one string"):
        train_tokenizer("a b c", 100)


@pytest.mark.slow  # reads all of Multi30k's training text
def test_training_on_all_multi30k_is_fast_and_quiet(multi30k_dir, capfd):
    texts = [line for lang in ("en", "de", "fr") for line in _read_gz(multi30k_dir / f"train.{lang}.gz")]
    assert len(texts) == 87000
    start = time.perf_counter()
    tokenizer = train_tokenizer(texts, 8000)
    elapsed = time.perf_counter() - start
    assert capfd.readouterr() == ("", "")  # no progress bar: it left blank lines and escape codes in training logs
    logger.info("BPE 8000 on %d Multi30k sentences: %.2f s", len(texts), elapsed)
    assert len(tokenizer) == 8000
    assert elapsed < 60


def test_punctuation_is_a_token_of_its_own():
    texts = ["Ein Hund rennt.", "Zwei Männer lachen.", "Ein Hund rennt, ein Mann lacht!"] * 20
    tokenizer = train_tokenizer(texts, 80, min_freq=1)
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("Ein Hund rennt.")["input_ids"])
    assert tokens[-2:] == [".", "</s>"] and "▁rennt" in tokens  # not "t." or "rennt."
    assert [token for token in tokenizer.get_vocab() if len(token) > 1 and set(token) & set(".,!")] == []
    assert tokenizer.decode(tokenizer("Ein Hund rennt, ein Mann lacht!")["input_ids"], skip_special_tokens=True) == (
        "Ein Hund rennt, ein Mann lacht!"
    )
