"""The measurements of `scripts/gpu_check.py`, one a process, each writing OUTPUT/units/NAME.json (CUDA only).

python scripts/gpu_units.py versions -
python scripts/gpu_units.py tests OUTPUT tests
python scripts/gpu_units.py train OUTPUT train-bf16 scripts/multi30k/quick-de-en.yaml --max_steps 200 --bf16 true
python scripts/gpu_units.py generate OUTPUT decode-generate epoch-transformer-b64 train-fp32
python scripts/gpu_units.py ctranslate2 OUTPUT decode-ctranslate2 epoch-transformer-b64
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

ROOT = Path(__file__).resolve().parents[1]
DECODE_BATCH = 64
FIRST_RUN = "train-fp32"  # trains the tokenizer the other runs share
WARM_UP_STEPS = 20  # steps whose one-off costs (kernel loading, allocator growth) steady speed leaves out
GIB = 1024**3


def versions() -> dict[str, Any]:
    """The GPU and the libraries that run on it."""
    import torch
    import transformers

    info = {"gpu": torch.cuda.get_device_name(0), "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
            "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / GIB, 1),
            "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
            "platform": platform.platform()}  # fmt: skip
    try:
        import ctranslate2

        info["ctranslate2"] = f"{ctranslate2.__version__} ({ctranslate2.get_cuda_device_count()} CUDA devices)"
    except ImportError:
        info["ctranslate2"] = "not installed"
    return info


# ---- tests ------------------------------------------------------------------------------------------------


def run_tests(output: Path) -> dict[str, Any]:
    """The suite's CUDA tests (`-m gpu`): how many passed, failed, errored and skipped, and which failed."""
    report = output / "units" / "tests-junit.xml"
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    subprocess.run(command, cwd=ROOT, check=False)
    return junit_counts(report)


def junit_counts(report: Path) -> dict[str, Any]:
    cases = ElementTree.parse(report).getroot().iter("testcase")
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failed: list[str] = []
    for case in cases:
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        outcome = "failed" if outcome in ("failure", "error") else outcome
        counts[outcome] += 1
        if outcome == "failed":
            failed.append(f"{case.get('classname')}::{case.get('name')}")
    return {**counts, "failed_tests": failed} if failed else counts


# ---- training ---------------------------------------------------------------------------------------------


def train_run(output: Path, name: str, recipe: str, options: Sequence[str]) -> dict[str, Any]:
    """Train a recipe through the package's `train` (Trainer + accelerate) with `options`; its speed in target
    tokens per second over the whole run and after its first `WARM_UP_STEPS` steps (one-off costs such as kernel
    loading fall in those), its peak GPU memory and its last logged loss."""
    from unittest import mock

    import torch

    from hf_bahdanau import register
    from hf_bahdanau.cli.train import parse_train_args
    from hf_bahdanau.training import run

    register()
    arguments = ["--config", str(ROOT / recipe), "--output-dir", str(output / "runs" / name), "--overwrite",
                 "--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end", "false",
                 "--report_to", "none", *shared_tokenizer(output, name), *options]  # fmt: skip
    clock = StepClock(WARM_UP_STEPS)
    build_trainer = run.build_trainer

    def clocked(*args: Any, **kwargs: Any) -> Any:
        trainer = build_trainer(*args, **kwargs)
        trainer.add_callback(clock)
        return trainer

    torch.cuda.reset_peak_memory_stats()
    with mock.patch.object(run, "build_trainer", clocked):
        trainer = run.train(*parse_train_args(arguments))
    history = trainer.state.log_history
    runtime = next(entry["train_runtime"] for entry in reversed(history) if "train_runtime" in entry)
    steps = trainer.state.global_step
    per_step = step_tokens(trainer.get_train_dataloader(), steps)
    figures = {"steps": steps, "batch": trainer.args.per_device_train_batch_size,
               "train_runtime_s": round(runtime, 2), "target_tokens_per_s": round(sum(per_step) / runtime)}  # fmt: skip
    if clock.seconds_after_warm_up:
        figures["first_steps_s"] = round(clock.seconds_to_warm_up, 2)
        figures["steady_tokens_per_s"] = round(sum(per_step[WARM_UP_STEPS:]) / clock.seconds_after_warm_up)
    return {**figures, "peak_memory_gib": round(torch.cuda.max_memory_allocated() / GIB, 2),
            "loss": round(next(entry["loss"] for entry in reversed(history) if "loss" in entry), 4),
            "model_dir": str(output / "runs" / name)}  # fmt: skip


class StepClock(TrainerCallback):
    """A Trainer callback timing the first `warm_up` steps and the steps after them, on a synchronized GPU."""

    def __init__(self, warm_up: int) -> None:
        self.warm_up = warm_up
        self.times: dict[str, float] = {}
        self.seconds_to_warm_up = 0.0
        self.seconds_after_warm_up = 0.0

    def now(self) -> float:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter()

    def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
        self.times["begin"] = self.now()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.warm_up:
            self.times["warm"] = self.now()
            self.seconds_to_warm_up = self.times["warm"] - self.times["begin"]

    def on_train_end(self, *args: Any, **kwargs: Any) -> None:
        if "warm" in self.times:
            self.seconds_after_warm_up = self.now() - self.times["warm"]


def shared_tokenizer(output: Path, name: str) -> list[str]:
    """The tokenizer the first De->En run trained, for the later runs (the same vocabulary, no retraining)."""
    first = output / "runs" / FIRST_RUN
    shared = name != FIRST_RUN and (first / "tokenizer.json").is_file()
    return ["--tokenizer_name_or_path", str(first)] if shared else []


def step_tokens(batches: Iterator[dict[str, Any]], steps: int) -> list[int]:
    """The target tokens (labels that count in the loss) of each of the first `steps` batches the seeded sampler
    yields, the batches the run trained on."""
    counts: list[int] = []
    for step, batch in enumerate(batches):
        if step == steps:
            break
        counts.append(int((batch["labels"] != -100).sum()))
    return counts


# ---- decoding ---------------------------------------------------------------------------------------------


def test_pairs(model_dir: Path) -> tuple[list[str], list[str]]:
    """test_2016_flickr's sources and references in the run's languages."""
    from hf_bahdanau.data.corpora import load_parallel_corpus
    from hf_bahdanau.data.run_settings import read_data_settings

    settings = read_data_settings(model_dir)
    source, target = settings["src_lang"], settings["tgt_lang"]
    rows = load_parallel_corpus("multi30k", source, target, splits=("test",))["test"]["translation"]
    return [row[source] for row in rows], [row[target] for row in rows]


def timed(translate: Callable[[list[str]], list[str]], sources: list[str], references: list[str]) -> dict[str, Any]:
    """Sentences per second of `translate` over all sources in batches (after one warm-up batch), and sacreBLEU."""
    import sacrebleu
    import torch

    translate(sources[:DECODE_BATCH])
    torch.cuda.synchronize()
    start = time.perf_counter()
    outputs = [text for i in range(0, len(sources), DECODE_BATCH) for text in translate(sources[i : i + DECODE_BATCH])]
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"sentences_per_s": round(len(sources) / seconds, 1),
            "bleu": round(sacrebleu.corpus_bleu(outputs, [references]).score, 2)}  # fmt: skip


def generate_run(output: Path, trained: Sequence[str]) -> dict[str, Any]:
    """`generate()` on the GPU, greedy and beam 5, with the model an earlier unit trained."""
    import torch

    from hf_bahdanau import register
    from hf_bahdanau.decoding.loading import load_translation_model

    register()
    model_dir = trained_model(output, trained)
    model, tokenizer = load_translation_model(str(model_dir))
    model = model.cuda()
    sources, references = test_pairs(model_dir)

    def translate(texts: list[str], beams: int) -> list[str]:
        inputs = tokenizer(texts, padding=True, truncation=True, return_tensors="pt").to("cuda")
        with torch.inference_mode():
            generated = model.generate(**inputs, num_beams=beams)
        return tokenizer.batch_decode(generated, skip_special_tokens=True)

    result: dict[str, Any] = {"model": model_dir.name}
    for beams in (1, 5):
        result[f"beam{beams}"] = timed(lambda texts, b=beams: translate(texts, b), sources, references)
    return result


def ctranslate2_run(output: Path, trained: Sequence[str]) -> dict[str, Any]:
    """CTranslate2 on CUDA (fp16 and int8 weights, fp16 activations), greedy and beam 5, on the same model."""
    from hf_bahdanau.decoding.engines.ctranslate2 import CTranslate2Translator
    from hf_bahdanau.decoding.export.ctranslate2 import cached_export, require_ctranslate2

    require_ctranslate2()
    model_dir = trained_model(output, trained)
    export = cached_export(model_dir, "float32")
    sources, references = test_pairs(model_dir)
    result: dict[str, Any] = {"model": model_dir.name}
    for compute_type in ("float16", "int8_float16"):
        translator = CTranslate2Translator(export, device="cuda", compute_type=compute_type)
        for beams in (1, 5):
            result[f"{compute_type}.beam{beams}"] = timed(texts_translator(translator, beams), sources, references)
    return result


def texts_translator(translator: Callable[..., list[dict[str, str]]], beams: int) -> Callable[[list[str]], list[str]]:
    """Texts -> translations through a pipeline-like translator with `beams` beams."""
    return lambda texts: [
        row["translation_text"] for row in translator(texts, batch_size=DECODE_BATCH, num_beams=beams)
    ]


def trained_model(output: Path, units: Sequence[str]) -> Path:
    """The model folder of the first of `units` that saved one (the one-epoch run, else a fixed-steps run)."""
    folders = [output / "runs" / unit for unit in units]
    found = next((folder for folder in folders if (folder / "model.safetensors").is_file()), None)
    if found is None:
        raise SystemExit(f"no model to decode with: none of the units {', '.join(units)} saved one")
    return found


def main(argv: Sequence[str]) -> int:
    kind, output = argv[0], Path(argv[1])
    if kind == "versions":
        print(json.dumps(versions()))
        return 0
    name, rest = argv[2], argv[3:]
    runs: dict[str, Callable[[], dict[str, Any]]] = {
        "tests": lambda: run_tests(output),
        "train": lambda: train_run(output, name, rest[0], rest[1:]),
        "generate": lambda: generate_run(output, rest),
        "ctranslate2": lambda: ctranslate2_run(output, rest),
    }
    (output / "units").mkdir(parents=True, exist_ok=True)
    figures = runs[kind]()
    (output / "units" / f"{name}.json").write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
