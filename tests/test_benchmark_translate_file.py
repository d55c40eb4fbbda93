"""scripts/benchmark_translate_file.py on 20 lines: both ways run in one run, the outputs are compared, and the
Markdown table is logged and written."""

from __future__ import annotations

import gzip
import re

import pytest
from helpers import make_model

from hf_bahdanau.data.tokenization import train_tokenizer
from hf_bahdanau.models.pipelines import save_for_pipeline


@pytest.mark.slow
def test_twenty_lines_give_the_table_of_both_ways_and_compare_their_output(multi30k_dir, tmp_path, monkeypatch,
                                                                          run_script):  # fmt: skip
    with gzip.open(multi30k_dir / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as lines:
        tokenizer = train_tokenizer(lines.read().splitlines()[:20], 300, min_freq=1)  # the lines it translates
    model = make_model("d2l_transformer", width=16, vocab_size=len(tokenizer), source_language="de")
    model.generation_config.max_new_tokens = 10
    folder = save_for_pipeline(model, tokenizer, tmp_path / "model")
    output = tmp_path / "table.md"
    argv = ["--model", str(folder), "--lines", "20", "--threads", "1", "--num-beams", "2", "--batch-tokens", "200"]
    monkeypatch.setenv("HF_BAHDANAU_DATA_DIR", str(multi30k_dir.parent))
    log = run_script("benchmark_translate_file", *argv, "--output", str(output))
    table = output.read_text()
    assert table.rstrip("\n") in log  # logged as well
    header, _, *rows = table.splitlines()
    assert header.startswith("| 20 lines, beams 2, 1 threads | seconds | sentences/s | speed-up |")
    assert len(rows) == 3 and rows[0].startswith("| fixed: 32 sentences a batch, input order (the pipeline) |")
    fixed, unbounded, bounded = ([cell.strip(" |x") for cell in row.split(" | ")[1:]] for row in rows)
    for seconds, per_second, speed_up, _ in (fixed, unbounded, bounded):
        assert float(seconds) > 0 and float(per_second) > 0 and float(speed_up) > 0
    assert fixed[2] == "1.00" and fixed[3] == "0"
    assert unbounded[3] == "0"  # sorting by length and token batches alone change no translation
    differ = int(bounded[3])  # the source bound may cut a random model's long output: named when it does
    assert (f"sorted: {differ} of 20 translations unlike fixed (lines " in log) == (differ > 0)
    bounded_way = r"\| sorted by length, at most 200 tokens a batch, bounded by the source \(default\) \|"
    assert re.search(bounded_way, table)
