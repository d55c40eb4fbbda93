"""Outputs never destroy inputs: `evaluate --output` refuses a corpus or model file (through links too), `translate
--heatmap` a file it reads, `train --overwrite` its --config file; a symlinked output folder is locked and replaced as
the folder it points at, the link kept; an output folder that cannot be made, and Trainer options that do not go
together, are one-line errors before any work."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TINY, error_of, logged_errors

from hf_bahdanau.cli import main
from hf_bahdanau.training import run_folder


def corpus_folder(tatoeba_tsv: Path, folder: Path) -> Path:
    folder.mkdir()
    lines = tatoeba_tsv.read_text(encoding="utf-8").splitlines()[:12]
    for split in ("train", "validation", "test"):
        for lang, column in (("en", 0), ("fr", 1)):
            text = "".join(line.split("\t")[column] + "\n" for line in lines)
            (folder / f"{split}.{lang}").write_text(text, encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    "output", ["corpus file", "link to corpus file", "hard link to corpus file", "file of corpus folder", "model file"]
)
def test_evaluate_refuses_an_output_that_is_an_input(saved, tatoeba_tsv, tmp_path, caplog, output):
    corpus = tmp_path / "pairs.tsv"
    corpus.write_text("".join(tatoeba_tsv.read_text(encoding="utf-8").splitlines(keepends=True)[:12]))
    folder = corpus_folder(tatoeba_tsv, tmp_path / "pairs")
    (tmp_path / "link.txt").symlink_to(corpus)
    (tmp_path / "hard.txt").hardlink_to(corpus)
    data, target = {
        "corpus file": (corpus, corpus),
        "link to corpus file": (corpus, tmp_path / "link.txt"),
        "hard link to corpus file": (corpus, tmp_path / "hard.txt"),
        "file of corpus folder": (folder, folder / "test.fr"),
        "model file": (corpus, saved / "tokenizer.json"),
    }[output]
    before = {path: path.read_bytes() for path in (corpus, folder / "test.fr", saved / "tokenizer.json")}
    argv = ["evaluate", "--model", str(saved), "--data", str(data), "--split", "test", "--test-split", "test",
            "--max-samples", "2", "--output", str(target)]  # fmt: skip
    assert main(argv) == 1
    (error,) = logged_errors(caplog)
    assert f"--output {target}" in error and "\n" not in error
    assert {path: path.read_bytes() for path in before} == before


def test_locks_through_a_link_and_through_the_real_path_conflict(tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    for first, second in ((link, real), (real, link)):
        with run_folder.locked_output_dir(first):
            with pytest.raises(FileExistsError, match="another run is training"):
                with run_folder.locked_output_dir(second):
                    pass


@pytest.mark.slow
def test_overwrite_through_a_symlinked_output_dir_keeps_the_link(tatoeba_tsv, tmp_path):
    real, link = tmp_path / "runs" / "real", tmp_path / "link"
    real.mkdir(parents=True)
    (real / "trainer_state.json").write_text("{}")  # an earlier run
    (real / "old.txt").write_text("old")
    link.symlink_to(real)
    argv = ["train", "--data", str(tatoeba_tsv), "--output-dir", str(link), "--overwrite", *TINY, "--max_steps", "2",
            "--logging_steps", "1", "--eval_strategy", "no", "--save_strategy", "no",
            "--load_best_model_at_end", "false"]  # fmt: skip
    assert main(argv) == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert (real / "model.safetensors").is_file() and not (real / "old.txt").exists()
    assert sorted(os.listdir(tmp_path)) == ["link", "runs"]  # no link.staging, link.replaced or .link.lock
    assert sorted(os.listdir(real.parent)) == [".real.lock", "real"]  # nor real.staging or real.replaced


@pytest.mark.parametrize("link", ["same path", "hard link", "symlink"])
def test_translate_heatmap_is_never_a_file_it_reads(saved, tmp_path, caplog, link):
    banned = tmp_path / "banned.txt"
    banned.write_text("chat\n")
    targets = {"avoid list": banned, "model file": saved / "config.json"}
    before = {path: path.read_bytes() for path in targets.values()}
    for target in targets.values():
        heatmap = target if link == "same path" else tmp_path / f"{target.stem}.png"
        if link == "hard link":
            heatmap.hardlink_to(target)
        elif link == "symlink":
            heatmap.symlink_to(target)
        argv = ["translate", "--model", str(saved), "i see the dog .", "--avoid", str(banned), "--heatmap"]
        assert error_of([*argv, str(heatmap)], caplog).endswith("which translate reads: choose another")
    encoder = tmp_path / "attention-encoder.png"  # one of the three files of --heatmap-all
    encoder.symlink_to(saved / "config.json")
    heatmap = str(tmp_path / "attention.png")
    assert error_of([*argv, heatmap, "--heatmap-all"], caplog).startswith(f"--heatmap {encoder} would overwrite")
    assert {path: path.read_bytes() for path in before} == before


def test_train_overwrite_refuses_to_delete_its_config_file(tatoeba_tsv, tmp_path, caplog):
    run = tmp_path / "run"
    run.mkdir()
    (run / "trainer_state.json").write_text("{}")  # an earlier run
    config = run / "train.yaml"
    config.write_text(f"data: {tatoeba_tsv}\nmax_steps: 1\n")
    argv = ["train", "--config", str(config), "--output-dir", str(run), "--overwrite", *TINY, "--eval_strategy", "no",
            "--save_strategy", "no", "--load_best_model_at_end", "false"]  # fmt: skip
    assert error_of(argv, caplog).startswith(f"--overwrite would delete {config}, which this run reads")
    assert sorted(path.name for path in run.iterdir()) == ["train.yaml", "trainer_state.json"]


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder in which no folder can be made, by root too (immutable, through `chattr +i`); skips where neither
    permissions nor chattr make one."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
        pytest.skip("no way to make a folder read-only for root here")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


@pytest.mark.parametrize("place", ["under a file", "in /proc", "in a read-only folder"])
def test_train_refuses_an_output_dir_it_cannot_make_in_one_line(tatoeba_tsv, tmp_path, caplog, request, place):
    (tmp_path / "file").write_text("mine")
    parent = {"under a file": tmp_path / "file", "in /proc": Path("/proc/hf-bahdanau-test")}.get(place)
    parent = parent or request.getfixturevalue("read_only_folder")
    output = parent / "run"
    argv = ["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY, "--max_steps", "1"]
    error = error_of(argv, caplog)
    assert error.startswith(f"--output-dir {output} cannot be made: ") and "another run" not in error
    assert (tmp_path / "file").read_text() == "mine" and not output.exists()


def test_train_options_the_trainer_refuses_are_a_one_line_error(tatoeba_tsv, tmp_path, caplog):
    argv = ["train", "--data", str(tatoeba_tsv), "--output-dir", str(tmp_path / "run"), *TINY, "--save_steps", "10",
            "--eval_steps", "1000"]  # fmt: skip
    assert error_of(argv, caplog).startswith("--load_best_model_at_end requires the saving steps to be a round")
    assert not (tmp_path / "run").exists()
