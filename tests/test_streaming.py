"""Tests of `train --streaming` (hf_bahdanau.data.streaming): the bucketed stream, its resume, its split across
processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import weights_digest
from transformers import AutoModelForSeq2SeqLM

from hf_bahdanau.cli.train import parse_train_args
from hf_bahdanau.data.streaming import LengthBucketedBatches, stream_train_pairs, tokenized_stream
from hf_bahdanau.data.tokenization import train_tokenizer
from hf_bahdanau.training.run import train

WORDS = "zero one two three four five six seven eight nine".split()


def _sentence(number: int) -> str:
    """A distinct sentence of 2 to 8 words for each number (its digits spelt out, then filler by its size)."""
    digits = [WORDS[int(d)] for d in str(number)]
    return " ".join(digits + ["and"] * (number % 6))


@pytest.fixture
def corpus_folder(tmp_path: Path) -> Path:
    """A Multi30k-style folder: 203 distinct training pairs, 20 validation and 10 test pairs."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for stem, numbers in (("train", range(203)), ("val", range(300, 320)), ("test", range(400, 410))):
        (folder / f"{stem}.en").write_text("".join(_sentence(n) + "\n" for n in numbers), "utf-8")
        (folder / f"{stem}.fr").write_text("".join(_sentence(n).upper() + " !\n" for n in numbers), "utf-8")
    return folder


def _batches(folder: Path, rank: int = 0, world_size: int = 1, buffer_size: int = 40) -> LengthBucketedBatches:
    tokenizer = train_tokenizer([_sentence(n) for n in range(203)] + [_sentence(n).upper() for n in range(203)], 200)
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
    assert sorted(parts[0] + parts[1]) == sorted((_sentence(n), _sentence(n).upper() + " !") for n in range(203))


TINY_STREAM = [
    "--src-lang", "en", "--tgt-lang", "fr", "--test_split", "test", "--vocab_size", "200",
    "--embedding_size", "16", "--hidden_size", "16", "--encoder_layers", "1", "--decoder_layers", "1",
    "--dropout", "0.0", "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "10",
    "--learning_rate", "0.01", "--warmup_steps", "0", "--lr_scheduler_type", "constant", "--logging_steps", "1",
    "--generation_max_length", "10", "--eval_strategy", "no", "--load_best_model_at_end", "false",
    "--streaming", "true", "--bucket_buffer_size", "40",
]  # fmt: skip


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
def test_two_processes_stream_disjoint_parts(corpus_folder, tmp_path):
    """`torchrun --nproc_per_node 2 ... --streaming`: each process reads its own half of the stream, so no pair is
    seen twice in a pass; one model is saved, the same on both ranks."""
    output = tmp_path / "ddp"
    script = tmp_path / "train_streaming.py"  # `train`, recording the source of every pair each rank's stream yields
    script.write_text(textwrap.dedent(
        """
        import json, logging, os, sys
        from hf_bahdanau.data import streaming
        from hf_bahdanau.cli.train import parse_train_args
        from hf_bahdanau.training.run import release_process_group, train
        from helpers import weights_digest
        seen = []
        read = streaming.LengthBucketedBatches.__iter__
        def recording(self):
            for batch in read(self):
                seen.extend([self.passes, row["input_ids"]] for row in batch)
                yield batch
        streaming.LengthBucketedBatches.__iter__ = recording
        logging.basicConfig(level=logging.INFO)
        trainer = train(*parse_train_args(sys.argv[1:]))
        release_process_group()  # as the train command does
        rank = os.environ["RANK"]
        with open(os.path.join(os.path.dirname(__file__), f"seen-{rank}.json"), "w") as f:
            json.dump(seen, f)
        print(f"rank {rank} weights {weights_digest(trainer.model)}")
        """
    ))  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script),
         "--data", str(corpus_folder), "--output-dir", str(output), *TINY_STREAM, "--max_steps", "16",
         "--save_steps", "16", "--use_cpu", "true"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1",
             "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    seen = [json.loads((tmp_path / f"seen-{rank}.json").read_text()) for rank in (0, 1)]
    first_pass = [[tuple(ids) for number, ids in part if number == 1] for part in seen]
    assert all(len(part) == len(set(part)) for part in first_pass)  # no pair twice in one process's pass
    assert not set(first_pass[0]) & set(first_pass[1])  # nor in both processes
    assert len(first_pass[0]) + len(first_pass[1]) == 203  # 102 + 101 pairs: each read its whole part
    assert any(number == 2 for number, _ in seen[0])  # 16 steps go past a pass of 13 batches (40 + 40 + 22 pairs)
    digests = sorted(line for line in result.stdout.splitlines() if " weights " in line)
    saved = weights_digest(AutoModelForSeq2SeqLM.from_pretrained(output))
    assert digests == [f"rank 0 weights {saved}", f"rank 1 weights {saved}"]
    for rank in (0, 1):
        assert (output / "checkpoint-16" / f"stream_state-{rank}.json").is_file()


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
