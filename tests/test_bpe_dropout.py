"""BPE-dropout: on while training (`train --bpe_dropout P`), off in the saved tokenizer."""

import json
import logging

import datasets
import pytest
from helpers import make_model
from transformers import Seq2SeqTrainingArguments

from hf_bahdanau import tokenize_corpus, train_tokenizer
from hf_bahdanau.cli import main
from hf_bahdanau.data import tokenization
from hf_bahdanau.data.tokenization import BpeDropoutEncoder, bpe_dropout_view, check_bpe_dropout, with_bpe_dropout
from hf_bahdanau.training.options import RunArguments
from hf_bahdanau.training.trainer import build_trainer

PAIRS = [
    ("Ein Mann fährt mit dem Fahrrad die Straße entlang.", "A man rides a bike down the street."),
    ("Zwei Hunde spielen im Schnee.", "Two dogs play in the snow."),
    ("Eine Frau liest ein Buch im Park.", "A woman reads a book in the park."),
    ("Kinder spielen Fußball auf der Wiese.", "Children play soccer on the meadow."),
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([text for pair in PAIRS for text in pair] * 20, vocab_size=150, min_freq=1)


def test_dropout_varies_the_split_and_leaves_the_tokenizer_deterministic(tokenizer, tmp_path):
    text = "Zwei Hunde spielen im Schnee."
    dropping = with_bpe_dropout(tokenizer, 0.3)
    splits = {tuple(dropping.tokenize(text)) for _ in range(20)}
    assert len(splits) > 1  # the same words, segmented differently from call to call
    assert all(dropping.convert_tokens_to_string(list(split)) == text for split in splits)
    assert {tuple(tokenizer.tokenize(text)) for _ in range(20)} == {tuple(tokenizer.tokenize(text))}
    assert tokenizer.backend_tokenizer.model.dropout is None
    tokenizer.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))["model"]["dropout"] is None


def test_the_train_view_re_encodes_every_read_within_the_lengths(tokenizer):
    corpus = datasets.DatasetDict(
        train=datasets.Dataset.from_dict({"translation": [{"de": de, "en": en} for de, en in PAIRS]})
    )
    tokenized, _ = tokenize_corpus(corpus, tokenizer, "de", "en", max_source_length=64, max_target_length=8)
    view = bpe_dropout_view(tokenized["train"], corpus["train"], BpeDropoutEncoder(tokenizer, 0.5, "de", "en", 64, 8))
    reads = [view[:] for _ in range(10)]
    assert set(reads[0]) == {"input_ids", "attention_mask", "labels"}
    sources = {tuple(ids) for read in reads for ids in read["input_ids"]}
    assert len(sources) > len(PAIRS)  # not one fixed encoding per pair
    plain = tokenized["train"][:]
    for read in reads:
        decoded = tokenizer.batch_decode(read["input_ids"], skip_special_tokens=True)
        assert decoded == tokenizer.batch_decode(plain["input_ids"], skip_special_tokens=True)  # the same text
        assert all(ids[-1] == tokenizer.eos_token_id for ids in read["input_ids"] + read["labels"])
        assert all(len(ids) <= 8 for ids in read["labels"])  # cut as tokenize_corpus cuts, keeping </s>
        assert [len(mask) for mask in read["attention_mask"]] == [len(ids) for ids in read["input_ids"]]
    assert tokenized["train"][:] == plain  # the dataset itself keeps the deterministic encoding


def test_dropout_encodes_the_text_and_keeps_unknown_characters(tokenizer):
    # "☃" is not in the tokenizer's alphabet: <unk> on both sides, in every dropout read (decoding the ids with
    # skip_special_tokens and encoding again lost it from the source and the target).
    pair = {"de": "Zwei Hunde spielen im ☃ Schnee.", "en": "Two dogs play in the ☃ snow."}
    corpus = datasets.DatasetDict(train=datasets.Dataset.from_dict({"translation": [pair]}))
    tokenized, _ = tokenize_corpus(corpus, tokenizer, "de", "en", max_source_length=64, max_target_length=64)
    unk = tokenizer.unk_token_id
    assert tokenized["train"][0]["input_ids"].count(unk) == tokenized["train"][0]["labels"].count(unk) == 1
    view = bpe_dropout_view(tokenized["train"], corpus["train"], BpeDropoutEncoder(tokenizer, 0.3, "de", "en", 64, 64))
    reads = [view[0] for _ in range(10)]
    assert all(read["input_ids"].count(unk) == read["labels"].count(unk) == 1 for read in reads)
    plain = [tokenizer.decode(tokenized["train"][0][name]) for name in ("input_ids", "labels")]
    assert "<unk>" in plain[0]
    for read in reads:  # the same text, <unk> in its place
        assert [tokenizer.decode(read[name]) for name in ("input_ids", "labels")] == plain
    assert len({tuple(read["input_ids"]) for read in reads}) > 1  # still dropout
    with pytest.raises(ValueError, match="2 sentence pairs for 1 tokenized ones"):
        twice = datasets.concatenate_datasets([corpus["train"]] * 2)
        bpe_dropout_view(tokenized["train"], twice, BpeDropoutEncoder(tokenizer, 0.3, "de", "en", 64, 64))


def test_trainer_keeps_the_text_column_for_the_dropout_view(tokenizer, tmp_path):
    pairs = [{"de": de, "en": en} for de, en in PAIRS]
    corpus = datasets.DatasetDict(train=datasets.Dataset.from_dict({"translation": pairs}))
    tokenized, _ = tokenize_corpus(corpus, tokenizer, "de", "en", max_source_length=64, max_target_length=64)
    texts = datasets.Dataset.from_dict({"translation": pairs[::-1]}).select([3, 2, 1, 0])  # a selection: in order
    view = bpe_dropout_view(tokenized["train"], texts, BpeDropoutEncoder(tokenizer, 0.1, "de", "en", 64, 64))
    model = make_model("bahdanau", vocab_size=len(tokenizer))
    args = Seq2SeqTrainingArguments(
        str(tmp_path),
        per_device_train_batch_size=4,
        train_sampling_strategy="group_by_length",
        dataloader_pin_memory=False,
        report_to=[],
    )
    splits = datasets.DatasetDict(train=view, validation=tokenized["train"])
    for sampling in ("group_by_length", "random"):
        args.train_sampling_strategy = sampling
        trainer = build_trainer(model, tokenizer, splits, args, RunArguments())
        batch = next(iter(trainer.get_train_dataloader()))  # the Trainer removed no column the transform reads
        assert {"input_ids", "attention_mask", "labels"} <= set(batch) and "translation" not in batch
        sources = tokenizer.batch_decode(batch["input_ids"], skip_special_tokens=True)
        targets = tokenizer.batch_decode(batch["labels"].clamp(min=0), skip_special_tokens=True)
        assert sorted(zip(sources, targets, strict=True)) == sorted(PAIRS)  # each pair with its own text


def test_dropout_with_a_tokenizer_to_train_that_is_not_bpe_fails_before_the_corpus_is_read(
    tatoeba_tsv, tmp_path, caplog, monkeypatch
):
    args = ["train", "--data", str(tatoeba_tsv), "--src-lang", "en", "--tgt-lang", "fr", "--max_train_samples", "64",
            "--max_eval_samples", "8", "--vocab_size", "200", "--embedding_size", "16", "--hidden_size", "16",
            "--max_steps", "2", "--eval_strategy", "no", "--load_best_model_at_end", "false", "--save_strategy", "no",
            "--bpe_dropout", "0.1"]  # fmt: skip
    caplog.set_level(logging.INFO)
    for kind in ("unigram", "word"):
        caplog.clear()
        assert main([*args, "--tokenizer_type", kind, "--output-dir", str(tmp_path / kind)]) == 1
        assert f"--bpe_dropout needs a BPE tokenizer (--tokenizer_type bpe), not --tokenizer_type {kind}" in caplog.text
        assert "truncated" not in caplog.text and "tokenizer of" not in caplog.text  # no corpus read, none trained
        assert not (tmp_path / kind).exists()
    caplog.clear()
    assert main([*args[:-2], "--tokenizer_type", "wordpiece", "--output-dir", str(tmp_path / "wordpiece")]) == 1
    assert "--tokenizer_type 'wordpiece' is not one of bpe, unigram, word" in caplog.text
    assert "truncated" not in caplog.text


def test_bad_dropout_settings_are_one_line_errors(tokenizer):
    for value in (1.0, -0.1):
        with pytest.raises(ValueError, match=r"--bpe_dropout must be a probability in \[0, 1\)"):
            check_bpe_dropout(value)
    with pytest.raises(ValueError, match="not with --streaming"):
        check_bpe_dropout(0.1, streaming=True)
    check_bpe_dropout(0.0, streaming=True)
    words = train_tokenizer([text for pair in PAIRS for text in pair], None, model="word", min_freq=1)
    with pytest.raises(ValueError, match="needs a BPE tokenizer .*not a WordLevel one"):
        with_bpe_dropout(words, 0.1)


@pytest.mark.slow
def test_train_uses_dropout_and_saves_the_tokenizer_without_it(tatoeba_tsv, tmp_path, monkeypatch):
    calls = []
    encode = tokenization.BpeDropoutEncoder.__call__
    monkeypatch.setattr(
        tokenization.BpeDropoutEncoder, "__call__", lambda self, batch: calls.append(1) or encode(self, batch)
    )
    tiny = ["--src-lang", "en", "--tgt-lang", "fr", "--max_train_samples", "64", "--max_eval_samples", "8",
            "--vocab_size", "200", "--embedding_size", "16", "--hidden_size", "16", "--max_steps", "2",
            "--per_device_train_batch_size", "16", "--eval_strategy", "no", "--load_best_model_at_end", "false",
            "--save_strategy", "no", "--logging_steps", "1", "--data", str(tatoeba_tsv)]  # fmt: skip
    assert main(["train", *tiny, "--output-dir", str(tmp_path / "plain")]) == 0
    assert not calls
    assert main(["train", *tiny, "--output-dir", str(tmp_path / "dropout"), "--bpe_dropout", "0.1"]) == 0
    assert calls  # the Trainer read its batches through the dropout encoder
    saved = (tmp_path / "dropout" / "tokenizer.json").read_text(encoding="utf-8")
    assert json.loads(saved)["model"]["dropout"] is None
    assert saved == (tmp_path / "plain" / "tokenizer.json").read_text(encoding="utf-8")  # the no-dropout tokenizer
