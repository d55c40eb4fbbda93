"""transformers' own common model tests (`ModelTesterMixin`, `GenerationTesterMixin`, `ConfigTester`) run against
every model variant, as transformers runs them against MarianMT.

    python3 scripts/transformers_common_tests.py --tests-dir ~/src/transformers
    python3 scripts/transformers_common_tests.py --tests-dir ~/src/transformers --variants GRU Transformer -k generate

`--tests-dir` is a transformers checkout (or unpacked sdist) whose `tests/` holds `test_modeling_common.py`,
`test_configuration_common.py`, `generation/test_utils.py`, `exporters/test_export.py` and
`utils/test_configuration_utils.py`; transformers' tests need `parameterized` (and `pytest-timeout`, for a limit per
test, when installed). This file holds only our testers: the tiny config and inputs of each variant (as Marian's
`MarianModelTester`) and a `unittest.TestCase` per variant with the base model and the model with a head. Each
variant runs in its own pytest process, one at a time, bounded by `--timeout`; the script prints per variant the
tests run, passed, skipped and failed, each failure with one line, and the skips with their reasons: transformers'
own (a GPU, flash attention, a slow test, ...) and ours, `NOT_APPLICABLE`: tests of something the model does not
have, each with the reason.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import unittest
import unittest.mock
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from version_matrix import VARIANTS  # noqa: E402

TESTS_ENV = "HF_BAHDANAU_TRANSFORMERS_TESTS"  # the folder holding transformers' `tests/`, set for the pytest process
NOT_APPLICABLE_PREFIX = "not applicable: "
# Sizes of the tiny models (dropout as Marian's tester); the config settings of a variant come from the version matrix.
SIZES = {
    "bahdanau": dict(embedding_size=16, hidden_size=16, encoder_layers=2, decoder_layers=2),
    "d2l_transformer": dict(d_model=16, ffn_dim=8, attention_heads=4, encoder_layers=2, decoder_layers=2),
}

# Tests of transformers' mixins that ask for something a model does not have: {model type or variant: {test: reason}}.
OWN_TABLES = (
    "it embeds the source with get_input_embeddings(), the decoder's table, but the encoder reads its own (untied "
    "embeddings: tie_encoder_decoder_embeddings=False), so inputs_embeds and input_ids differ by design; the "
    "shared-embeddings variant runs it, and tests/test_modeling_common.py checks the encoder's own table"
)
UNTIED = (
    "it turns tie_word_embeddings off but leaves tie_encoder_decoder_embeddings on, a combination the config refuses "
    "with a ValueError naming it (the encoder shares the decoder's embedding, tied to the output layer); the untied "
    "variants run it"
)
NOT_APPLICABLE: dict[str, dict[str, str]] = {
    **{
        variant: {"test_inputs_embeds_matches_input_ids": OWN_TABLES}
        for variant in VARIANTS
        if variant != "shared embeddings"
    },
    "bahdanau": {
        "test_attention_outputs": "it checks per-layer self-attentions of the encoder and decoder, shaped by "
        "num_attention_heads; the RNN has no self-attention, only the decoder's attention over the source, returned "
        "as cross_attentions (checked by tests/test_modeling_common.py)",
    },
    "shared embeddings": {
        "test_load_save_without_tied_weights": UNTIED,
        "test_model_forward_default_config_values": UNTIED,
    },
}
# The name mappings transformers' model tests read to tell a base model (no loss, no labels; one with a head loads its
# weights) and a seq2seq language model (labels; the loss's alignment) apart: ours join them in the test module, as
# transformers' own models are in them.
MAPPINGS = {"MODEL_MAPPING_NAMES": "base model", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES": "head"}


def class_name(variant: str) -> str:
    """The test case's class name of a variant: "shared embeddings" -> "SharedEmbeddingsTest"."""
    return "".join(word[0].upper() + word[1:] for word in variant.split()) + "Test"


def build_test_cases() -> dict[str, type]:
    """`{class name: unittest.TestCase}` of every variant, built on transformers' mixins from `TESTS_ENV`."""
    sys.path.insert(0, os.environ[TESTS_ENV])
    sys.path.insert(1, str(REPO))
    import torch
    from tests.generation.test_utils import GenerationTesterMixin
    from tests.test_configuration_common import ConfigTester

    from hf_bahdanau import GENERATION_DEFAULTS, get_model_type
    from hf_bahdanau.models.bahdanau_decoder import BahdanauDecoderState
    from tests import test_modeling_common as common
    from tests.test_modeling_common import ModelTesterMixin, ids_tensor

    class TranslationModelTester:
        """The tiny config and inputs transformers' mixins ask a model tester for."""

        batch_size, seq_length, vocab_size = 4, 7, 99
        is_training = True

        def __init__(self, parent: unittest.TestCase, model_type: str, settings: dict) -> None:
            self.parent = parent
            self.config_class = get_model_type(model_type).config_class
            self.settings = {**SIZES[model_type], **settings, "vocab_size": self.vocab_size}
            config = self.get_config()
            self.hidden_size = config.hidden_size
            self.num_hidden_layers = config.num_hidden_layers
            self.num_attention_heads = getattr(config, "attention_heads", None)
            self.encoder_seq_length = self.decoder_seq_length = self.key_length = self.seq_length
            if model_type == "bahdanau":  # hidden states: the embeddings and the top RNN layer's outputs
                self.expected_num_hidden_layers = 2

        def get_config(self):
            return self.config_class(**self.settings)

        def prepare_config_and_inputs_for_common(self):
            config = self.get_config()
            input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
            input_ids[:, -1] = config.eos_token_id
            decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
            attention_mask = input_ids.ne(config.pad_token_id).long()
            return config, {
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                "decoder_input_ids": decoder_input_ids,
            }

        prepare_config_and_inputs = prepare_config_and_inputs_for_common

    class TranslationModelTest(ModelTesterMixin, GenerationTesterMixin):
        """What every variant's test case shares: the tester, transformers' config tests and name mappings."""

        is_encoder_decoder = True
        # transformers runs this test only for models whose configuration file names a year from 2023 on in its
        # copyright line (ours has none) or that ask for it.
        test_can_init_all_missing_weights_before_2023 = True
        model_type: str
        settings: dict

        def setUp(self) -> None:  # noqa: N802 (unittest's name)
            self.model_tester = TranslationModelTester(self, self.model_type, self.settings)
            properties = ["hidden_size", "num_hidden_layers"] + (["num_attention_heads"] if self.has_attentions else [])
            self.config_tester = ConfigTester(
                self,
                config_class=self.model_tester.config_class,
                common_properties=properties,
                **self.model_tester.settings,
            )
            # transformers' tests take a model's generation defaults to be transformers' (greedy search), as a model
            # made from a config gets them there; ours search 5 beams by default (a translation's settings).
            patchers = [unittest.mock.patch.dict(GENERATION_DEFAULTS, num_beams=1)]
            base, head = self.all_model_classes
            for mapping, kind in MAPPINGS.items():
                names = {**getattr(common, mapping), self.model_type: (base if kind == "base model" else head).__name__}
                patchers.append(unittest.mock.patch.object(common, mapping, names))
            for patcher in patchers:
                patcher.start()
                self.addCleanup(patcher.stop)

        def test_config(self) -> None:
            self.config_tester.run_common_tests()

    class RecurrentStateChecks:
        """The hooks transformers' testers of recurrent models (Mamba, RWKV) answer, for the RNN's decoder state (a
        `BahdanauDecoderState`, not a key/value `Cache`); no self-attention, so no attention checks by layer and
        head."""

        has_attentions = False

        def _check_past_key_values_for_generate(self, batch_size, past_key_values, seq_length, config) -> None:
            cache, shape = past_key_values, (config.decoder_layers, batch_size, config.hidden_size)
            self.assertIsInstance(cache, BahdanauDecoderState)
            self.assertEqual(tuple(cache.hidden.shape), shape)
            cell = None if cache.cell is None else tuple(cache.cell.shape)
            self.assertEqual(cell, shape if config.rnn_type == "lstm" else None)  # an LSTM's cells
            self.assertEqual(cache.projected_keys.shape[0], batch_size)
            if seq_length is not None:
                self.assertEqual(cache.get_seq_length(), seq_length)

        def _check_encoder_hidden_states_for_generate(self, hidden_states, batch_size, config, prompt_length) -> None:
            """The embeddings and the encoder's outputs, `encoder_output_size` wide (both directions' states side by
            side from a bidirectional encoder)."""
            widths = (config.embedding_size, config.encoder_output_size)
            self.assertIsInstance(hidden_states, tuple)
            self.assertEqual(
                [tuple(states.shape) for states in hidden_states],
                [(batch_size, prompt_length, width) for width in widths],
            )

        def _check_caches_are_equal(self, cache1, cache2) -> None:
            self.assertEqual(cache1.get_seq_length(), cache2.get_seq_length())
            for name in ("hidden", "cell", "projected_keys"):
                first, second = getattr(cache1, name), getattr(cache2, name)
                self.assertEqual(first is None, second is None, name)
                if first is not None:
                    torch.testing.assert_close(first, second, msg=name)

    def not_applicable(reason: str):
        def test(self: unittest.TestCase) -> None:
            self.skipTest(NOT_APPLICABLE_PREFIX + reason)

        return test

    cases = {}
    for variant, (model_type, settings) in VARIANTS.items():
        model_class = get_model_type(model_type).model_class
        attributes = {
            "model_type": model_type,
            "settings": settings,
            "all_model_classes": (model_class.base_model_class, model_class),
            **{
                test: not_applicable(reason)
                for test, reason in {
                    **NOT_APPLICABLE.get(model_type, {}),
                    **NOT_APPLICABLE.get(variant, {}),
                }.items()
            },
        }
        bases = (RecurrentStateChecks,) if model_type == "bahdanau" else ()
        name = class_name(variant)
        cases[name] = type(name, (*bases, TranslationModelTest, unittest.TestCase), attributes)
    return cases


if os.environ.get(TESTS_ENV):  # imported by the pytest process
    globals().update(build_test_cases())


# ---- the runner ---------------------------------------------------------------------------------------------------


def tests_root(path: Path) -> Path:
    """The folder whose `tests/` holds transformers' common tests (`path` itself or its parent)."""
    for root in (path, path.parent):
        if (root / "tests" / "test_modeling_common.py").is_file() and (root / "tests" / "__init__.py").is_file():
            return root
    raise SystemExit(f"{path} holds no transformers tests/ (tests/test_modeling_common.py and tests/__init__.py)")


def run_variant(variant: str, root: Path, log_dir: Path, timeout: int, select: str | None) -> dict:
    """Run one variant's test case in its own pytest process; return its counts, failures and skips."""
    report, log = log_dir / f"{class_name(variant)}.xml", log_dir / f"{class_name(variant)}.log"
    ini = log_dir / "pytest.ini"
    # Neither this repository's pytest settings nor transformers' (whose markers are not registered here).
    ini.write_text("[pytest]\nfilterwarnings = ignore::pytest.PytestUnknownMarkWarning\n")
    command = [sys.executable, "-m", "pytest", f"{Path(__file__).resolve()}::{class_name(variant)}", "-c", str(ini)]
    command += ["--rootdir", str(root), "-p", "no:cacheprovider", "-q", "-rs", f"--junitxml={report}"]
    try:
        import pytest_timeout  # noqa: F401

        command.append(f"--timeout={max(timeout // 10, 60)}")
    except ImportError:
        pass
    if select:
        command += ["-k", select]
    pythonpath = os.pathsep.join([str(root), str(REPO), str(HERE), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, TESTS_ENV: str(root), "PYTHONPATH": pythonpath, "HF_HUB_OFFLINE": "1"}
    env["TRANSFORMERS_OFFLINE"] = "1"
    try:
        with log.open("w") as out:
            # From the log folder, outside this repository: neither its conftest.py nor its tests/ package is seen.
            subprocess.run(
                command, cwd=log_dir, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
            )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s (log: {log})"}
    if not report.is_file():
        return {"error": f"pytest wrote no report (log: {log})"}
    return read_report(report)


def one_line(text: str | None) -> str:
    line = next((line.strip() for line in (text or "").splitlines() if line.strip()), "")
    return line[:220]


def read_report(report: Path) -> dict:
    """Counts, failures `{test: reason}` and skips `{reason: [tests]}` (ours and transformers') of a JUnit report."""
    result = {"run": 0, "passed": 0, "failed": {}, "skipped": defaultdict(list), "not applicable": defaultdict(list)}
    for case in ET.parse(report).getroot().iter("testcase"):
        result["run"] += 1
        name = case.get("name")
        problem = case.find("failure")
        problem = case.find("error") if problem is None else problem
        skipped = case.find("skipped")
        if problem is not None:
            result["failed"][name] = one_line(problem.get("message")) or one_line(problem.text)
        elif skipped is not None:
            reason = re.sub(r"^(unittest\.case\.)?SkipTest: ", "", skipped.get("message") or "")
            if reason.startswith(NOT_APPLICABLE_PREFIX):
                result["not applicable"][reason.removeprefix(NOT_APPLICABLE_PREFIX)].append(name)
            else:
                result["skipped"][one_line(reason)].append(name)
        else:
            result["passed"] += 1
    return result


def summary(results: dict[str, dict]) -> str:
    """The table of counts, then each variant's failures and skips, as Markdown."""
    lines = [
        "| variant | run | passed | skipped (transformers) | not applicable (ours) | failed |",
        "|---|---|---|---|---|---|",
    ]
    for variant, result in results.items():
        if "error" in result:
            lines.append(f"| {variant} | {result['error']} | | | | |")
            continue
        skipped, ours = (sum(map(len, result[kind].values())) for kind in ("skipped", "not applicable"))
        lines.append(
            f"| {variant} | {result['run']} | {result['passed']} | {skipped} | {ours} | {len(result['failed'])} |"
        )
    for variant, result in results.items():
        for test, reason in sorted(result.get("failed", {}).items()):
            lines.append(f"- {variant}: FAILED {test}: {reason}")
    for kind in ("not applicable", "skipped"):
        reasons: Counter[tuple[str, str]] = Counter()
        for result in results.values():
            for reason, tests in result.get(kind, {}).items():
                for test in tests:
                    reasons[(reason, re.sub(r"_\d+(_\w+)?$", "", test))] += 1
        lines.append(f"\n{kind} (reason: tests, over all variants):")
        by_reason = defaultdict(list)
        for (reason, test), count in sorted(reasons.items()):
            by_reason[reason].append(test + (f" x{count}" if count > 1 else ""))
        lines += [f"- {reason}: {', '.join(tests)}" for reason, tests in by_reason.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests-dir", type=Path, required=True, help="a transformers checkout (or its tests/)")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--timeout", type=int, default=1200, help="seconds each variant may take (default 1200)")
    parser.add_argument("-k", dest="select", help="pytest's -k: only the tests it selects")
    parser.add_argument("--log-dir", type=Path, help="where the pytest logs and reports go (default: a temporary one)")
    args = parser.parse_args(argv)
    root = tests_root(args.tests_dir.expanduser().resolve())
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="transformers-common-tests-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for variant in args.variants:
        results[variant] = run_variant(variant, root, log_dir, args.timeout, args.select)
        print(f"{variant}: done", file=sys.stderr, flush=True)
    print(summary(results))
    print(f"\nlogs and JUnit reports: {log_dir}")
    return int(any("error" in result or result["failed"] for result in results.values()))


if __name__ == "__main__":
    sys.exit(main())
