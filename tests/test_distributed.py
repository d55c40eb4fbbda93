"""Data-parallel training in two processes (`torchrun --nproc_per_node 2`, gloo on the CPU; NCCL on GPUs under
`accelerate launch`): a corpus file that both ranks read, then a streamed corpus that they split, in one launch."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import TINY, TINY_STREAM, numbers_corpus, weights_digest
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

# Each rank trains with each argument list in turn, recording the pairs its stream yields in the streamed run, and
# prints a digest of the weights it ends with.
SCRIPT = """
import json, logging, os, sys
from helpers import weights_digest
from hf_bahdanau.cli.train import parse_train_args
from hf_bahdanau.data import streaming
from hf_bahdanau.training.run import release_process_group, train
seen = []
read = streaming.LengthBucketedBatches.__iter__
def recording(self):
    for batch in read(self):
        seen.extend([self.passes, row["input_ids"]] for row in batch)
        yield batch
streaming.LengthBucketedBatches.__iter__ = recording
logging.basicConfig(level=logging.INFO)
rank = os.environ["RANK"]
for run, args in enumerate(json.loads(sys.argv[1])):
    trainer = train(*parse_train_args(args))
    print(f"run {run} rank {rank} weights {weights_digest(trainer.model)}")
release_process_group()  # as the train command does
with open(os.path.join(os.path.dirname(__file__), f"seen-{rank}.json"), "w") as f:
    json.dump(seen, f)
"""


@pytest.mark.slow
def test_two_processes_train_one_model_from_a_file_and_from_a_stream(tatoeba_tsv, tmp_path):
    """Each run is saved once, with the same weights on both ranks, and no warning about unused parameters or two
    length limits; each rank reads its own part of the stream, so no pair is seen twice in a pass."""
    from_file, from_stream = tmp_path / "file", tmp_path / "stream"
    runs = [
        ["--data", str(tatoeba_tsv), "--output-dir", str(from_file), *TINY, "--per_device_train_batch_size", "16",
         "--max_steps", "6", "--eval_steps", "3", "--save_steps", "3", "--use_cpu", "true"],
        ["--data", str(numbers_corpus(tmp_path / "corpus")), "--output-dir", str(from_stream), *TINY_STREAM,
         "--max_steps", "16", "--save_steps", "16", "--use_cpu", "true"],
    ]  # fmt: skip
    (tmp_path / "train_twice.py").write_text(textwrap.dedent(SCRIPT))
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(tmp_path / "train_twice.py"),
         json.dumps(runs)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1",
             "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("saved the model, tokenizer and training curves") == 2  # once a run
    digests = sorted(line for line in result.stdout.splitlines() if " weights " in line)
    saved = [weights_digest(AutoModelForSeq2SeqLM.from_pretrained(output)) for output in (from_file, from_stream)]
    assert digests == [f"run {run} rank {rank} weights {saved[run]}" for run in (0, 1) for rank in (0, 1)]
    assert "find_unused_parameters=True" not in result.stderr and "Both `max_new_tokens`" not in result.stderr
    # The file: both ranks share each epoch.
    state = json.loads((from_file / "trainer_state.json").read_text())
    step_3 = next(entry for entry in state["log_history"] if entry.get("step") == 3)
    assert step_3["epoch"] == pytest.approx(3 / math.ceil(300 / (16 * 2)))
    vocab = AutoModelForSeq2SeqLM.from_pretrained(from_file).config.vocab_size
    assert vocab == len(AutoTokenizer.from_pretrained(from_file))
    # The stream: disjoint parts, each read whole, and a second pass.
    seen = [json.loads((tmp_path / f"seen-{rank}.json").read_text()) for rank in (0, 1)]
    first_pass = [[tuple(ids) for number, ids in part if number == 1] for part in seen]
    assert all(len(part) == len(set(part)) for part in first_pass)  # no pair twice in one process's pass
    assert not set(first_pass[0]) & set(first_pass[1])  # nor in both processes
    assert len(first_pass[0]) + len(first_pass[1]) == 203  # 102 + 101 pairs: each read its whole part
    assert any(number == 2 for number, _ in seen[0])  # 16 steps go past a pass of 13 batches (40 + 40 + 22 pairs)
    for rank in (0, 1):
        assert (from_stream / "checkpoint-16" / f"stream_state-{rank}.json").is_file()
