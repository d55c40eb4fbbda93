"""Work that stops part way keeps what it made: an interrupted translate keeps the batches it wrote, a resume skips a
corrupt checkpoint, a full disk while checkpointing keeps the old run, and a resumed run ends with the weights of an
uninterrupted one."""

import errno
import json
import logging
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch
from helpers import TINY_MODEL, TINY_RUN, copy_model, folder_bytes, make_model, random_ids
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM

from hf_bahdanau.cli import main
from hf_bahdanau.training import run_folder
from hf_bahdanau.training.assembly import realign_weights


@pytest.mark.slow
def test_an_interrupted_translate_keeps_the_batches_it_wrote(rnn_folder, tmp_path, capsys, cli_command):
    """SIGTERM, which translate turns into the KeyboardInterrupt that Ctrl-C raises (as Ctrl-C interrupts training in
    test_cli.py), ends it with the whole batches it wrote and one line."""
    words = ["Go", "I lost", "Tom is home", "We run", "She laughs", "Come here", "It rains", "They won"]
    lines = [f"{words[i % 8]} {i}." for i in range(5000)]
    source, translated, log = tmp_path / "source.txt", tmp_path / "translated.txt", tmp_path / "stderr.txt"
    source.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    command = [*cli_command, "translate", "--model", str(rnn_folder), "--num-beams", "1",
               "--batch-size", "8", "--max-new-tokens", "20"]  # fmt: skip
    with source.open("rb") as stdin, translated.open("wb") as stdout, log.open("wb") as stderr:
        process = subprocess.Popen(command, stdin=stdin, stdout=stdout, stderr=stderr)
    try:
        deadline = time.time() + 300
        while translated.stat().st_size == 0:  # the first batch is written as soon as it is done
            assert process.poll() is None and time.time() < deadline, log.read_text()[-2000:]
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    finally:
        process.kill()
    written = translated.read_text(encoding="utf-8").splitlines()
    assert process.returncode == 130 and 0 < len(written) < 5000 and len(written) % 8 == 0
    last = log.read_text(encoding="utf-8").strip().splitlines()[-1]
    assert f"ERROR hf_bahdanau: interrupted: wrote {len(written)} translations of the " in last
    # in order: the translations of the first lines, as an uninterrupted run gives them
    capsys.readouterr()
    assert main(["translate", "--model", str(rnn_folder), "--num-beams", "1", "--batch-size", "8",
                 "--max-new-tokens", "20", *lines[: min(len(written), 40)]]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines() == written[:40]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupt_while_a_batch_is_written_comes_once_it_is_written_and_counted(signum):
    """The window the test above can hit: a signal between a batch's write and its count waits for both. Ctrl-C's
    handler is Python's own, as in a process started from a terminal; the signal goes to this thread, whose handler
    runs before `pthread_kill` returns (sent to the process, another thread may take it, and the handler run later)."""
    from hf_bahdanau.cli.translate import terminate_as_interrupt

    assert threading.current_thread() is threading.main_thread()  # (where Python runs signal handlers)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # (the test's fixture puts back the one before)
    handlers = [signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)]
    written = []
    with pytest.raises(KeyboardInterrupt), terminate_as_interrupt() as whole:
        with whole():
            signal.pthread_kill(threading.get_ident(), signum)
            written.append("the batch")  # (a handler that raised would have raised before this line)
        written.append("the next batch")
    assert written == ["the batch"]
    assert [signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)] == handlers


def test_ctrl_c_ignored_as_translate_starts_stays_ignored():
    """A process started in the background of a script (or under nohup) inherits SIGINT ignored: so it stays."""
    from hf_bahdanau.cli.translate import terminate_as_interrupt

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (the test's fixture puts back the one before)
    with terminate_as_interrupt() as whole, whole():
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


@pytest.mark.slow
def test_resume_skips_a_checkpoint_whose_optimizer_state_is_corrupt(tatoeba_tsv, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    output = tmp_path / "run"
    common = ["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY_RUN, *TINY_MODEL["bahdanau"],
              "--eval_strategy", "no", "--load_best_model_at_end", "false", "--save_steps", "5"]  # fmt: skip
    assert main([*common, "--max_steps", "10"]) == 0
    newest = output / "checkpoint-10" / "optimizer.pt"
    size = newest.stat().st_size
    newest.write_bytes(b"\0" * size)  # the size its manifest lists: only reading it tells
    assert run_folder.is_complete_checkpoint(newest.parent)
    assert main([*common, "--max_steps", "15", "--resume"]) == 0
    messages = [record.getMessage() for record in caplog.records]
    assert any(m.startswith(f"skipping {newest.parent}: it is corrupt, optimizer.pt cannot be read") for m in messages)
    assert f"resuming from {output / 'checkpoint-5'}" in messages
    assert json.loads((output / "trainer_state.json").read_text())["global_step"] == 15

    for checkpoint in output.glob("checkpoint-*"):
        (checkpoint / "scheduler.pt").write_bytes(b"garbage")
        (checkpoint / run_folder.CHECKPOINT_MANIFEST).unlink()  # a checkpoint without a manifest: read, not measured
    assert main([*common, "--max_steps", "20", "--resume"]) == 1
    assert caplog.records[-1].getMessage() == f"--resume: no complete checkpoint-* folder in {output} to resume from"


@pytest.mark.slow
@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"),  # torch's, disk full
    ],
)
def test_a_full_disk_while_checkpointing_is_one_line_and_keeps_the_old_run(
    error, rnn_folder, tatoeba_tsv, tmp_path, monkeypatch, caplog
):
    output = copy_model(rnn_folder, tmp_path / "run")
    before = folder_bytes(output)
    save = torch.save

    def full_disk(obj, path, *args, **kwargs):
        if str(path).endswith("optimizer.pt"):
            Path(path).write_bytes(b"partial")
            raise error
        return save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    status = main(
        ["train", "--data", str(tatoeba_tsv), "--output-dir", str(output), *TINY_RUN, *TINY_MODEL["bahdanau"],
         "--eval_strategy", "no", "--load_best_model_at_end", "false", "--max_steps", "10", "--save_steps", "5",
         "--overwrite"]
    )  # fmt: skip
    assert status == 1
    message = caplog.records[-1].getMessage()
    checkpoint = run_folder.staging_dir(output) / "checkpoint-5"
    reason = "No space left on device" if isinstance(error, OSError) else str(error)
    assert message.startswith(f"could not write {checkpoint} ({reason}, ") and "\n" not in message
    assert message.endswith("MB free there); the earlier checkpoints, and any run it replaces, are intact: free disk "
                            "space and continue with --resume")  # fmt: skip
    assert not checkpoint.exists()  # its space freed
    assert folder_bytes(output) == before  # the old run untouched


def test_a_loaded_model_has_aligned_weights_and_computes_the_gradients_of_the_saved_one(tmp_path):
    model = make_model("bahdanau", width=32, vocab_size=400, dropout=0.3, encoder_layers=2, decoder_layers=2)
    model.save_pretrained(tmp_path / "saved")
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "saved")
    realign_weights(loaded)  # as training does with a model it continues
    # CPU math libraries round differently on operands that do not start on a 64-byte boundary
    assert {tensor.data_ptr() % 64 for tensor in (*loaded.parameters(), *loaded.buffers())} == {0}
    source, labels = random_ids(32, 12, vocab=400), random_ids(32, 17, seed=1, vocab=400)

    def gradients(net):
        net.train()
        torch.manual_seed(0)  # the same dropout masks
        net(input_ids=source, labels=labels).loss.backward()
        return [parameter.grad for parameter in net.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(gradients(model), gradients(loaded), strict=True))


@pytest.mark.slow
def test_a_resumed_rnn_run_ends_bit_for_bit_with_the_weights_of_an_uninterrupted_one(tatoeba_tsv, tmp_path):
    """With dropout, a resumed run's first step matches to the bit only because the model `from_pretrained` loads has
    its weights 64-byte aligned again (`assembly.realign_weights`), as the uninterrupted run's are."""
    common = ["train", "--data", str(tatoeba_tsv), *TINY_RUN, *TINY_MODEL["bahdanau"], "--seed", "3",
              "--lr_scheduler_type", "constant", "--eval_strategy", "no", "--load_best_model_at_end", "false",
              "--save_steps", "3", "--logging_steps", "3", "--dropout", "0.3", "--encoder_layers", "2",
              "--decoder_layers", "2"]  # fmt: skip
    uninterrupted, resumed = tmp_path / "uninterrupted", tmp_path / "resumed"
    assert main([*common, "--output-dir", str(uninterrupted), "--max_steps", "6"]) == 0
    assert main([*common, "--output-dir", str(resumed), "--max_steps", "3"]) == 0  # as if stopped after step 3
    assert main([*common, "--output-dir", str(resumed), "--max_steps", "6", "--resume"]) == 0
    expected, got = load_file(uninterrupted / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert expected.keys() == got.keys()
    assert [name for name in expected if not torch.equal(expected[name], got[name])] == []
