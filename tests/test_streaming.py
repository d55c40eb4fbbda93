"""Tests of `train --streaming` (hf_bahdanau.data.streaming): the bucketed stream, its resume, its split across
processes (a two-process run: test_distributed.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import TINY_STREAM, numbered_sentence, numbers_corpus, weights_digest

from hf_bahdanau.cli.train import parse_train_args
from hf_bahdanau.data.streaming import LengthBucketedBatches, stream_train_pairs, tokenized_stream
from hf_bahdanau.data.tokenization import train_tokenizer
from hf_bahdanau.training.run import train


@pytest.fixture
def corpus_folder(tmp_path: Path) -> Path:
    return numbers_corpus(tmp_path / "corpus")


def _batches(folder: Path, rank: int = 0, world_size: int = 1, buffer_size: int = 40) -> LengthBucketedBatches:
    tokenizer = train_tokenizer(
        [numbered_sentence(n) for n in range(203)] + [numbered_sentence(n).upper() for n in range(203)], 200
    )
    pairs = stream_train_pairs(str(folder), "en", "fr", test_split="test", rank=rank, world_size=world_size)
    return LengthBucketedBatches(tokenized_stream(pairs, tokenizer, "en", "fr", 32, 32), 8, buffer_size, seed=3)


def _ids(batches: list[list[dict]]) -> list[list[tuple[int, ...]]]:
    return [[tuple(row["input_ids"]) for row in batch] for batch in batches]


def test_bucketed_stream_covers_a_pass_once_and_resumes_where_it_stopped(corpus_folder):
    stream = _batches(corpus_folder)
    iterator = iter(stream)
    first = [next(iterator) for _ in range(9)]  # 9 batches read: the loader read one ahead of the 8 used
    position = stream.position(8)
    one_pass = first + list(iterator)
    sources = [ids for batch in _ids(one_pass) for ids in batch]
    assert len(sources) == len(set(sources)) == 203  # every pair once in a pass
    assert sum(len(batch) == 8 for batch in one_pass) == len(one_pass) - 1 == 25  # buffers of 40 pairs, then 3
    lengths = [[len(row["input_ids"]) for row in batch] for batch in one_pass]
    spread = sum(max(batch) - min(batch) for batch in lengths) / len(lengths)
    assert spread < 2.0  # sorted within a buffer of 40: a batch holds sentences of nearly one length
    assert position["pass"] == 0 and position["buffer"] == 1 and position["skip"] == 3  # 5 batches a buffer

    resumed = _batches(corpus_folder)  # a new process, from the stored position
    resumed.resume_from(json.loads(json.dumps(position)))
    assert _ids(list(resumed)) == _ids(one_pass[8:])  # the rest of the pass, not its start
    second_pass = list(stream)
    assert _ids(second_pass) != _ids(one_pass)  # the next pass: another order
    assert sorted(ids for batch in _ids(second_pass) for ids in batch) == sorted(sources)


def test_each_process_streams_its_own_pairs(corpus_folder):
    parts = [
        [(row["src"], row["tgt"]) for row in stream_train_pairs(str(corpus_folder), "en", "fr", test_split="test",
                                                                rank=rank, world_size=2)]
        for rank in (0, 1)
    ]  # fmt: skip
    assert (len(parts[0]), len(parts[1])) == (102, 101)
    assert not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1]) == sorted(
        (numbered_sentence(n), numbered_sentence(n).upper() + " !") for n in range(203)
    )


def test_streaming_needs_max_steps_and_a_folder(corpus_folder, tmp_path):
    args = ["--data", str(corpus_folder), "--output-dir", str(tmp_path / "run"), *TINY_STREAM]
    with pytest.raises(ValueError, match="--streaming needs --max_steps: a stream has no length"):
        train(*parse_train_args(args))
    with pytest.raises(ValueError, match="--bucket_buffer_size 4 must hold at least one batch"):
        train(*parse_train_args([*args, "--max_steps", "2", "--bucket_buffer_size", "4"]))
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a\tb\n", "utf-8")
    with pytest.raises(ValueError, match="--streaming reads a corpus folder .*pairs.tsv is not one"):
        stream_train_pairs(str(pairs), "en", "fr")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_resumed_streaming_run_continues_the_stream(corpus_folder, tmp_path):
    """Steps 1-6 in one go, and steps 1-4 then 5-6 resumed, end with the same weights: the resumed run read batches
    5 and 6 of the stream, not its first two again."""
    common = ["--data", str(corpus_folder), *TINY_STREAM, "--save_steps", "2"]
    whole = train(*parse_train_args([*common, "--output-dir", str(tmp_path / "whole"), "--max_steps", "6"]))
    cut = tmp_path / "cut"
    train(*parse_train_args([*common, "--output-dir", str(cut), "--max_steps", "4"]))
    position = json.loads((cut / "checkpoint-4" / "stream_state-0.json").read_text())
    assert (position["batches"] + position["skip"], position["pass"]) == (4, 0)
    resumed = train(*parse_train_args([*common, "--output-dir", str(cut), "--max_steps", "6", "--resume"]))
    assert resumed.state.global_step == 6
    assert weights_digest(resumed.model) == weights_digest(whole.model)
    restarted = tmp_path / "restarted"  # the check has teeth: the same resume without the stored position differs
    train(*parse_train_args([*common, "--output-dir", str(restarted), "--max_steps", "4"]))
    (restarted / "checkpoint-4" / "stream_state-0.json").unlink()
    manifest = restarted / "checkpoint-4" / "checkpoint_complete.json"
    manifest.write_text(json.dumps({k: v for k, v in json.loads(manifest.read_text()).items() if "stream" not in k}))
    again = train(*parse_train_args([*common, "--output-dir", str(restarted), "--max_steps", "6", "--resume"]))
    assert weights_digest(again.model) != weights_digest(whole.model)


@pytest.mark.slow
def test_a_resume_at_the_end_of_a_pass_trains_on_to_max_steps(corpus_folder, tmp_path):
    """A finished run of one whole pass (26 batches: 5 buffers of 40 pairs, then 3 pairs), resumed with more steps,
    starts the next pass instead of finding the stream empty and saving the step-26 model as if it were done."""
    run = tmp_path / "run"
    common = ["--data", str(corpus_folder), "--output-dir", str(run), *TINY_STREAM, "--save_steps", "26"]
    train(*parse_train_args([*common, "--max_steps", "26"]))
    with pytest.raises(ValueError, match="holds a model trained for 26 steps; resuming to --max_steps 20 would"):
        train(*parse_train_args([*common, "--max_steps", "20", "--resume"]))
    resumed = train(*parse_train_args([*common, "--max_steps", "28", "--resume"]))
    assert resumed.state.global_step == 28
    assert json.loads((run / "trainer_state.json").read_text())["global_step"] == 28


def test_a_position_past_the_end_of_a_shrunk_corpus_resumes_with_the_next_pass(corpus_folder, caplog):
    stream = _batches(corpus_folder)
    whole_pass = list(stream)
    past_the_end = {**stream.position(len(whole_pass)), "skip": 40}  # the corpus lost pairs since the checkpoint
    resumed = _batches(corpus_folder)
    resumed.resume_from(past_the_end)
    next_pass = list(resumed)
    assert _ids(next_pass) == _ids(list(stream))  # the second pass of the uninterrupted stream, not nothing
    assert "the train stream ended before the stored position" in caplog.text
