"""Tests run commands in-process (`main(argv)`): what a test changes in the process is put back after it
(`helpers.kept_process_state`, conftest's `kept_state` around every test), so that tests pass in any order and in
one process or several."""

import logging
import os
import signal

import torch
from helpers import kept_process_state
from transformers.utils import logging as transformers_logging


def test_the_environment_folder_signals_root_logger_threads_and_progress_bars_are_put_back(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_BAHDANAU_TEST_CHANGED", "before")
    monkeypatch.setenv("HF_BAHDANAU_TEST_REMOVED", "before")
    monkeypatch.delenv("HF_BAHDANAU_TEST_ADDED", raising=False)
    root, folder, threads = logging.getLogger(), os.getcwd(), torch.get_num_threads()
    handlers, level, sigterm = list(root.handlers), root.level, signal.getsignal(signal.SIGTERM)
    transformers_logging.enable_progress_bar()
    added = logging.StreamHandler()
    with kept_process_state():
        os.environ["HF_BAHDANAU_TEST_CHANGED"] = "after"
        del os.environ["HF_BAHDANAU_TEST_REMOVED"]
        os.environ["HF_BAHDANAU_TEST_ADDED"] = "after"
        os.chdir(tmp_path)
        signal.signal(signal.SIGTERM, lambda *_: None)
        root.addHandler(added)
        root.setLevel(logging.DEBUG if level != logging.DEBUG else logging.ERROR)
        torch.set_num_threads(threads + 1)
        transformers_logging.disable_progress_bar()
    assert os.environ["HF_BAHDANAU_TEST_CHANGED"] == "before" and os.environ["HF_BAHDANAU_TEST_REMOVED"] == "before"
    assert "HF_BAHDANAU_TEST_ADDED" not in os.environ
    assert os.getcwd() == folder
    assert signal.getsignal(signal.SIGTERM) is sigterm
    assert root.handlers == handlers and root.level == level
    assert torch.get_num_threads() == threads
    assert transformers_logging.is_progress_bar_enabled()
