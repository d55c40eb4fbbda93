"""`translate` on pipes: a line that comes down a pipe is translated as soon as the input pauses, not when the pipe
closes; a reader that goes away ends it quietly, and a full disk under stdout is a one-line error."""

from __future__ import annotations

import os
import select
import subprocess
import time

import pytest
from helpers import tiny_translator


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_translator("bahdanau", tokenizer, beams=1, max_new_tokens=4)


@pytest.mark.slow  # a translate process
def test_a_line_down_an_open_pipe_is_translated_before_the_pipe_closes(folder, cli_command):
    command = [*cli_command, "translate", "--model", str(folder), "--num-beams", "1"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    try:
        process.stdin.write("Ein Mann fährt Fahrrad.\nZwei Hunde spielen im Schnee.\n".encode())
        process.stdin.flush()  # and the pipe stays open, as `(echo ...; sleep 45) | hf-bahdanau translate`
        deadline, lines = time.time() + 240, b""
        while lines.count(b"\n") < 2 and time.time() < deadline:
            if select.select([process.stdout], [], [], 1)[0]:
                lines += os.read(process.stdout.fileno(), 4096)
            assert process.poll() is None
        assert lines.count(b"\n") == 2  # both translations, with stdin still open
        process.stdin.write(b"Ein Junge springt ins Wasser.\n")
        process.stdin.close()
        rest = process.stdout.read()
        process.wait(timeout=120)
        assert process.returncode == 0 and (lines + rest).count(b"\n") == 3
    finally:
        process.kill()


@pytest.mark.slow  # a translate process: a reader that goes away is a pipe's behaviour
def test_a_reader_that_goes_away_ends_translate_quietly(folder, cli_command):
    command = [*cli_command, "translate", "--model", str(folder), "--num-beams", "1"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    try:
        process.stdin.write("Ein Mann fährt Fahrrad.\n".encode())
        process.stdin.flush()
        assert process.stdout.readline().endswith(b"\n")  # as `| head -1` reads
        process.stdout.close()
        process.stdin.write(b"Zwei Hunde spielen im Schnee.\n" * 50)
        process.stdin.close()
        errors = process.stderr.read().decode()
        process.wait(timeout=120)
        assert process.returncode == 141 and "Traceback" not in errors and "Exception ignored" not in errors, errors
    finally:
        process.kill()


@pytest.mark.slow  # a translate process whose stdout is /dev/full
def test_a_full_disk_under_stdout_is_a_one_line_error(folder, cli_command):
    command = [*cli_command, "translate", "--model", str(folder), "--num-beams", "1"]
    with open("/dev/full", "wb") as full:
        process = subprocess.run(command, input="Ein Mann fährt Fahrrad.\n".encode(), stdout=full,
                                 stderr=subprocess.PIPE, timeout=300,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    errors = process.stderr.decode()
    assert process.returncode == 1 and "Traceback" not in errors and "Exception ignored" not in errors, errors
    last = errors.strip().splitlines()[-1]
    assert last.endswith("the translations cannot be written to stdout (No space left on device)")
