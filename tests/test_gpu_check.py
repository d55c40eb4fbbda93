"""scripts/gpu_check.py: without CUDA it skips cleanly; its arguments, its report and its goals from a results dict;
the pieces of scripts/gpu_units.py that need no GPU; every test that needs CUDA is in the check's `-m gpu` run."""

import ast
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import gpu_check  # noqa: E402
import gpu_units  # noqa: E402


@pytest.mark.slow  # torch's probe in its own process
def test_without_cuda_the_check_skips_cleanly_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU for the probe, even on a machine that has one
    assert gpu_check.main([str(tmp_path), "--no-install"]) == 0
    assert "no CUDA: skipped" in capsys.readouterr().out
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["skipped"].startswith("no CUDA") and report["units"] == {} and report["installed"] == []
    assert report["machine"]["torch"] == torch.__version__ and report["machine"]["cuda_available"] is False
    assert "Skipped: no CUDA" in (tmp_path / "gpu_check.md").read_text()
    assert not (tmp_path / "units").exists()  # nothing was measured


def test_arguments_choose_units_in_order_and_refuse_unknown_ones(tmp_path):
    args = gpu_check.parse_args([str(tmp_path)])
    assert [unit.name for unit in args.units][:4] == ["tests", "train-fp32", "train-bf16", "train-fp16"]
    assert len(args.units) == 9 and args.steps == 200 and not args.no_install
    assert sum(unit.seconds for unit in args.units) <= 10 * 60  # one device call's limit, installs aside
    args = gpu_check.parse_args([str(tmp_path), "--only", "decode-generate,train-bf16", "--steps", "40"])
    assert [unit.name for unit in args.units] == ["train-bf16", "decode-generate"]
    assert args.units[0].options[1:5] == ("--max_steps", "40", "--logging_steps", "10")
    for bad in (["--only", "train-fp64"], ["--steps", "2"]):
        with pytest.raises(SystemExit):
            gpu_check.parse_args([str(tmp_path), *bad])


def results(fp32_loss, bf16_loss, epoch_seconds):
    return {"machine": {"gpu": "Test GPU", "torch": "2.x"}, "installed": [], "units": {
        "train-fp32": {"status": "ok", "seconds": 30.0, "limit_s": 45, "loss": fp32_loss, "peak_memory_gib": 1.5},
        "train-bf16": {"status": "ok", "seconds": 20.0, "limit_s": 40, "loss": bf16_loss},
        "epoch-transformer-b64": {"status": "ok", "seconds": 40.0, "limit_s": 45, "train_runtime_s": epoch_seconds},
        "decode-generate": {"status": "ok", "seconds": 9.0, "limit_s": 45,
                            "beam1": {"sentences_per_s": 250.0, "bleu": 30.1}},
        "train-fp16": {"status": "failed", "seconds": 40.0, "limit_s": 40, "error": "ran out of its 40 s: step 180"},
    }}  # fmt: skip


def test_report_writes_every_figure_and_failure_with_the_goals(tmp_path):
    json_file, markdown_file = gpu_check.write_report(results(4.0, 4.06, 18.5), tmp_path / "report")
    written = json.loads(json_file.read_text())
    assert written["units"]["train-fp32"]["loss"] == 4.0
    assert written["goals"]["bf16_loss_vs_fp32"] == {"value": 0.015, "goal": "<= 0.02", "met": True}
    assert written["goals"]["transformer_bf16_epoch_s"] == {"value": 18.5, "goal": "< 20", "met": True}
    table = markdown_file.read_text()
    assert table.startswith("# GPU check: Test GPU\n")
    assert "| train-fp32 | ok | loss 4.0; peak_memory_gib 1.5 | 30.0 (45) |" in table
    assert "| decode-generate | ok | beam1.sentences_per_s 250.0; beam1.bleu 30.1 | 9.0 (45) |" in table
    assert "| train-fp16 | failed | ran out of its 40 s: step 180 | 40.0 (40) |" in table
    assert "| bf16_loss_vs_fp32 | 0.015 | <= 0.02 | yes |" in table


def test_goals_not_met_say_so_and_missing_figures_give_no_goal():
    goals = gpu_check.goals(results(4.0, 4.2, 20.0)["units"])
    assert goals["bf16_loss_vs_fp32"]["value"] == 0.05 and not goals["bf16_loss_vs_fp32"]["met"]
    assert not goals["transformer_bf16_epoch_s"]["met"]  # the goal is under 20 s
    assert gpu_check.goals({"train-fp32": {"status": "failed"}}) == {}


@pytest.mark.slow  # a unit's own process
def test_a_failing_or_slow_unit_is_a_failed_row_and_the_check_goes_on(tmp_path):
    env = gpu_check.unit_environment(tmp_path)
    failing = gpu_check.Unit("versions-here", "versions", 120)  # no GPU here: torch.cuda raises
    row = gpu_check.run_unit(failing, tmp_path, env, 1.0)
    assert row["status"] == "failed" and row["error"].startswith("exit status 1: ")
    row = gpu_check.run_unit(gpu_check.Unit("slow", "tests", 0.01), tmp_path, env, 1.0)
    assert row == {"seconds": row["seconds"], "limit_s": 0, "status": "failed", "error": "ran out of its 0 s: "
                   "(no output)"}  # fmt: skip


@pytest.mark.slow  # a process stopped after 2 s
def test_a_command_out_of_time_gives_what_it_printed_before_it_was_stopped():
    command = [sys.executable, "-c", "import sys, time; print('step 5', flush=True); "
               "print('loading', file=sys.stderr, flush=True); time.sleep(60)"]  # fmt: skip
    status, printed = gpu_check.run_bounded(command, 2)
    assert status == 124 and printed.split() == ["step", "5", "loading"]
    assert gpu_check.last_line(printed) == "loading"


def test_wheels_go_into_the_outputs_site_which_the_measurements_import_after_the_tree(tmp_path):
    with pytest.raises(SystemExit):
        gpu_check.parse_args([str(tmp_path / "out"), "--wheels", str(tmp_path)])  # no .whl there
    (tmp_path / "transformers-5.24.0-py3-none-any.whl").touch()
    args = gpu_check.parse_args([str(tmp_path / "out"), "--wheels", str(tmp_path)])
    assert args.wheels == tmp_path
    path = gpu_check.unit_environment(tmp_path, tmp_path / "out" / "site")["PYTHONPATH"].split(os.pathsep)
    assert path[:3] == [str(gpu_check.ROOT), str(SCRIPTS), str(tmp_path / "out" / "site")]


def test_step_tokens_count_the_labels_of_each_trained_step_only():
    batches = [{"labels": torch.tensor([[5, 6, -100], [7, -100, -100]])}, {"labels": torch.tensor([[1, 2, 3]])},
               {"labels": torch.tensor([[9, 9, 9, 9]])}]  # fmt: skip
    assert gpu_units.step_tokens(iter(batches), 2) == [3, 3]
    assert gpu_units.step_tokens(iter(batches), 10) == [3, 3, 4]


def test_the_step_clock_splits_the_first_steps_from_the_steady_ones(monkeypatch):
    ticks = iter([100.0, 103.5, 110.0])  # train begins, step 2 ends, train ends
    clock = gpu_units.StepClock(warm_up=2)
    monkeypatch.setattr(clock, "now", lambda: next(ticks))
    clock.on_train_begin(None, None, None)
    for step in (1, 2, 3, 4):
        clock.on_step_end(None, SimpleNamespace(global_step=step), None)
    clock.on_train_end(None, None, None)
    assert (clock.seconds_to_warm_up, clock.seconds_after_warm_up) == (3.5, 6.5)


def test_junit_counts_name_the_failed_tests(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text("""<testsuites><testsuite>
        <testcase classname="tests.test_a" name="test_ok"/>
        <testcase classname="tests.test_a" name="test_bad"><failure message="x"/></testcase>
        <testcase classname="tests.test_b" name="test_broken"><error message="y"/></testcase>
        <testcase classname="tests.test_b" name="test_cpu"><skipped message="z"/></testcase>
        </testsuite></testsuites>""")
    assert gpu_units.junit_counts(report) == {
        "passed": 1,
        "failed": 2,
        "skipped": 1,
        "failed_tests": ["tests.test_a::test_bad", "tests.test_b::test_broken"],
    }


def test_every_test_that_needs_cuda_is_marked_gpu():
    """The check runs `pytest -m gpu`: a test that skips without CUDA but lacks the mark would never run there."""
    needing_cuda = []
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                decorators = [ast.unparse(decorator) for decorator in node.decorator_list]
                if any("cuda" in decorator for decorator in decorators):
                    needing_cuda.append(node.name)
                    assert any("mark.gpu" in decorator for decorator in decorators), f"{path.name}::{node.name}"
    assert len(needing_cuda) >= 2  # the scan finds the suite's CUDA tests
