"""One prepared check of the package on a CUDA machine, about 8 minutes in all (the limits add up to under 10, one
device call): install, CUDA tests, training speed in fp32/bf16/fp16, epoch times, decoding speed; every figure to
OUTPUT/gpu_check.json and OUTPUT/gpu_check.md.

Each measurement runs in its own process under its own time limit (`scripts/gpu_units.py`), so a crash, an
out-of-memory error or a slow step is one failed row of the table, not a lost run. Without CUDA it prints
"no CUDA: skipped", writes a report saying so and exits 0.

    python scripts/gpu_check.py gpu-check/
    python scripts/gpu_check.py gpu-check/ --no-install --only train-fp32,train-bf16 --steps 100
    python scripts/gpu_check.py gpu-check/ --wheels wheels/   # a machine with no package index: wheels brought along
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
UNITS_SCRIPT = Path(__file__).resolve().parent / "gpu_units.py"
REPORT_NAME = "gpu_check"
GOAL_LOSS_GAP = 0.02  # bf16's loss within 2% of fp32's after the same steps
GOAL_EPOCH_SECONDS = 20.0  # one Multi30k epoch of the Transformer recipe in bf16 (an H100)


@dataclass(frozen=True)
class Unit:
    """One measurement: its name, what it runs (`gpu_units.py` arguments) and its time limit in seconds."""

    name: str
    kind: str
    seconds: float
    options: tuple[str, ...] = ()


def default_units(steps: int) -> list[Unit]:
    """The measurements in the order they run; their limits add up to under 10 minutes (an H100 took 7.5)."""
    recipes = (f"scripts/multi30k/{name}.yaml" for name in ("quick-de-en", "transformer-de-en", "de-en"))
    quick, transformer, rnn = recipes
    fixed = ("--max_steps", str(steps), "--logging_steps", str(max(1, steps // 4)))
    epoch = ("--num_train_epochs", "1", "--max_steps", "-1", "--bf16", "true")
    return [
        Unit("tests", "tests", 50),
        Unit("train-fp32", "train", 50, (quick, *fixed)),  # also reads the corpus and trains the tokenizer
        Unit("train-bf16", "train", 70, (quick, *fixed, "--bf16", "true")),
        Unit("train-fp16", "train", 70, (quick, *fixed, "--fp16", "true")),
        Unit("epoch-transformer-b64", "train", 100, (transformer, *epoch)),
        Unit("epoch-transformer-b256", "train", 80, (transformer, *epoch, "--per_device_train_batch_size", "256")),
        Unit("epoch-rnn-b64", "train", 100, (rnn, *epoch)),
        Unit("decode-generate", "generate", 30, ("epoch-transformer-b64", "train-fp32")),
        Unit("decode-ctranslate2", "ctranslate2", 40, ("epoch-transformer-b64", "train-fp32")),
    ]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", type=Path, help="The folder for the report and the runs' model folders.")
    parser.add_argument("--steps", type=int, default=200, help="Training steps of each fp32/bf16/fp16 run.")
    parser.add_argument("--only", help="Comma-separated unit names to run (default: all).")
    parser.add_argument("--no-install", action="store_true", help="Install nothing; measure what is installed.")
    parser.add_argument(
        "--wheels",
        type=Path,
        help="A folder of wheels for a machine with no package index (the package's dependencies its image lacks): "
        "installed without dependencies into OUTPUT/site, which the measurements import first; nothing else is "
        "installed.",
    )
    parser.add_argument("--time-scale", type=float, default=1.0, help="Multiply every unit's time limit.")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=default_data_dir(),
        help="The folder holding multi30k/ (default: $HF_BAHDANAU_DATA_DIR, else ../shared/data or shared/data).",
    )
    args = parser.parse_args(argv)
    if args.steps < 4:
        parser.error(f"--steps must be at least 4, got {args.steps}")
    if args.wheels is not None and not any(args.wheels.glob("*.whl")):
        parser.error(f"--wheels: no .whl file in {args.wheels}")
    known = {unit.name for unit in default_units(args.steps)}
    chosen = set(args.only.split(",")) if args.only else known
    if chosen - known:
        parser.error(f"unknown units {sorted(chosen - known)}; choose from {sorted(known)}")
    args.units = [unit for unit in default_units(args.steps) if unit.name in chosen]
    return args


def default_data_dir() -> Path:
    if os.environ.get("HF_BAHDANAU_DATA_DIR"):
        return Path(os.environ["HF_BAHDANAU_DATA_DIR"])
    candidates = (ROOT.parent / "shared" / "data", ROOT / "shared" / "data")
    return next((path for path in candidates if path.is_dir()), candidates[0])


# ---- setup ------------------------------------------------------------------------------------------------


def run_bounded(command: Sequence[str], seconds: float, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a command with a time limit: its exit status (124 when it ran out of time) and its output's tail."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=seconds, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired as error:  # what it printed before it was stopped says where it was
        printed = [part.decode(errors="replace") if isinstance(part, bytes) else part or ""
                   for part in (error.stdout, error.stderr)]  # fmt: skip
        return 124, "".join(printed)[-2000:]
    except OSError as error:
        return 127, str(error)
    return done.returncode, (done.stdout + done.stderr)[-2000:]


def probe_torch() -> dict[str, Any] | None:
    """torch's version, its CUDA build and whether it sees a GPU, from a fresh interpreter (None: no torch)."""
    code = (
        "import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda_build': torch.version.cuda, "
        "'cuda_available': torch.cuda.is_available()}))"
    )
    status, output = run_bounded([sys.executable, "-c", code], 120)
    return json.loads(output.strip().splitlines()[-1]) if status == 0 else None


def machine_has_nvidia_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None and run_bounded(["nvidia-smi", "-L"], 30)[0] == 0


def pip(*arguments: str, seconds: float) -> dict[str, Any]:
    status, output = run_bounded([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *arguments],
                                 seconds)  # fmt: skip
    return {"command": "pip install " + " ".join(arguments), "status": status, "output": output[-600:]}


def install(no_install: bool, wheels: Path | None, site: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Make sure a CUDA build of torch, the package (from this tree, as README installs it), pytest and CTranslate2
    are there, installing only what is missing, each install bounded; or, given `wheels`, only those wheels into
    `site`. Returns the torch probe and what was run."""
    done: list[dict[str, Any]] = []
    torch_info = probe_torch()
    if wheels is not None:
        files = sorted(str(path) for path in wheels.glob("*.whl"))
        done.append(pip("--no-index", "--no-deps", "--no-compile", "--upgrade", "--target", str(site), *files,
                        seconds=180))  # fmt: skip
    if no_install or wheels is not None:
        return torch_info, done
    if (torch_info is None or torch_info["cuda_build"] is None) and machine_has_nvidia_gpu():
        # PyPI's Linux torch is the CUDA build; a CPU build already there is replaced.
        done.append(pip("torch", *(("--force-reinstall",) if torch_info else ()), seconds=240))
        torch_info = probe_torch()
    if not (torch_info and torch_info["cuda_available"]):
        return torch_info, done
    if not installed("hf_bahdanau"):
        isolation = () if importlib.util.find_spec("setuptools") is None else ("--no-build-isolation",)
        done.append(pip(*isolation, "-e", str(ROOT), seconds=120))
    missing = [name for name in ("pytest", "ctranslate2") if importlib.util.find_spec(name) is None]
    if missing:
        done.append(pip(*missing, seconds=90))
    return torch_info, done


def installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


# ---- the measurements -------------------------------------------------------------------------------------


def unit_environment(data_dir: Path, site: Path | None = None) -> dict[str, str]:
    """The tree's code first (then the wheels' `site`, if any), the corpora, and no network for the Hub."""
    folders = [str(ROOT), str(ROOT / "scripts"), str(site) if site else None, os.environ.get("PYTHONPATH")]
    path = os.pathsep.join(filter(None, folders))
    return {**os.environ, "PYTHONPATH": path, "HF_BAHDANAU_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip


def run_unit(unit: Unit, output: Path, env: dict[str, str], time_scale: float) -> dict[str, Any]:
    """One measurement in its own process; its figures, or what went wrong, with the seconds it took."""
    result_file = output / "units" / f"{unit.name}.json"
    result_file.unlink(missing_ok=True)
    limit = unit.seconds * time_scale
    command = [sys.executable, str(UNITS_SCRIPT), unit.kind, str(output), unit.name, *unit.options]
    start = time.perf_counter()
    status, tail = run_bounded(command, limit, env)
    row: dict[str, Any] = {"seconds": round(time.perf_counter() - start, 1), "limit_s": round(limit)}
    if status == 0 and result_file.is_file():
        return {**row, "status": "ok", **json.loads(result_file.read_text(encoding="utf-8"))}
    reason = f"ran out of its {limit:.0f} s" if status == 124 else f"exit status {status}"
    return {**row, "status": "failed", "error": f"{reason}: {last_line(tail)}"}


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


# ---- the report -------------------------------------------------------------------------------------------


def goals(units: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The issue's two goals, from the figures: bf16's loss against fp32's, and the Transformer's bf16 epoch."""
    result: dict[str, dict[str, Any]] = {}
    fp32, bf16 = units.get("train-fp32", {}), units.get("train-bf16", {})
    if "loss" in fp32 and "loss" in bf16:
        gap = abs(bf16["loss"] - fp32["loss"]) / fp32["loss"]
        result["bf16_loss_vs_fp32"] = {"value": round(gap, 4), "goal": f"<= {GOAL_LOSS_GAP}",
                                       "met": gap <= GOAL_LOSS_GAP}  # fmt: skip
    epoch = units.get("epoch-transformer-b64", {})
    if "train_runtime_s" in epoch:
        seconds = epoch["train_runtime_s"]
        result["transformer_bf16_epoch_s"] = {"value": seconds, "goal": f"< {GOAL_EPOCH_SECONDS:.0f}",
                                              "met": seconds < GOAL_EPOCH_SECONDS}  # fmt: skip
    return result


def figures_text(row: dict[str, Any]) -> str:
    """A row's figures as `name value` pairs (nested ones as `outer.inner value`)."""
    skip = {"status", "seconds", "limit_s", "error", "model_dir"}
    pairs: list[str] = []
    for name, value in row.items():
        if name in skip:
            continue
        if isinstance(value, dict):
            pairs.extend(f"{name}.{inner} {shown}" for inner, shown in value.items())
        else:
            pairs.append(f"{name} {value}")
    return "; ".join(pairs)


def markdown(results: dict[str, Any]) -> str:
    machine = results["machine"]
    lines = [f"# GPU check: {machine.get('gpu', 'no GPU')}", ""]
    lines += [f"- {name}: {value}" for name, value in machine.items()]
    if results.get("skipped"):
        lines += ["", f"Skipped: {results['skipped']}"]
    lines += ["", "| unit | status | figures | seconds (limit) |", "| --- | --- | --- | --- |"]
    for name, row in results["units"].items():
        shown = figures_text(row) if row["status"] == "ok" else row.get("error", "")
        lines.append(f"| {name} | {row['status']} | {shown.replace('|', '/')} | {row['seconds']} ({row['limit_s']}) |")
    if results["goals"]:
        lines += ["", "| goal | value | target | met |", "| --- | --- | --- | --- |"]
        lines += [f"| {name} | {goal['value']} | {goal['goal']} | {'yes' if goal['met'] else 'no'} |"
                  for name, goal in results["goals"].items()]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_report(results: dict[str, Any], output: Path) -> tuple[Path, Path]:
    """The results as OUTPUT/gpu_check.json and the same as a Markdown table, OUTPUT/gpu_check.md."""
    output.mkdir(parents=True, exist_ok=True)
    results = {**results, "goals": goals(results["units"])}
    json_file, markdown_file = output / f"{REPORT_NAME}.json", output / f"{REPORT_NAME}.md"
    json_file.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    markdown_file.write_text(markdown(results), encoding="utf-8")
    return json_file, markdown_file


def versions(env: dict[str, str]) -> dict[str, Any]:
    """The GPU, torch, CUDA, transformers and CTranslate2 versions, from the units' environment."""
    command = [sys.executable, str(UNITS_SCRIPT), "versions", "-"]
    status, output = run_bounded(command, 120, env)
    return json.loads(output.strip().splitlines()[-1]) if status == 0 else {"versions": last_line(output)}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    site = args.output / "site" if args.wheels else None
    torch_info, installed = install(args.no_install, args.wheels, args.output / "site")
    results: dict[str, Any] = {"machine": {"python": sys.version.split()[0], **(torch_info or {"torch": None})},
                               "installed": installed, "units": {}}  # fmt: skip
    if not torch_info or not torch_info["cuda_available"]:
        results["skipped"] = "no CUDA: torch sees no GPU on this machine"
        write_report(results, args.output)
        print(f"no CUDA: skipped (report in {args.output})")
        return 0
    env = unit_environment(args.data_dir, site)
    results["machine"].update(versions(env))
    print(json.dumps(results["machine"]), flush=True)
    for unit in args.units:
        results["units"][unit.name] = row = run_unit(unit, args.output, env, args.time_scale)
        print(f"{unit.name}: {row['status']} in {row['seconds']} s: {figures_text(row) or row.get('error')}",
              flush=True)  # fmt: skip
        write_report(results, args.output)  # a run cut short keeps what it measured
    json_file, markdown_file = write_report(results, args.output)
    print(markdown_file.read_text(encoding="utf-8"))
    print(f"wrote {json_file} and {markdown_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
