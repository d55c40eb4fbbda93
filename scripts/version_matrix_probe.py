"""One release's round trip for `version_matrix.py`, run in that release's venv where `hf_bahdanau` is not installed.

    python version_matrix_probe.py WORK REPORT

For every model folder in WORK/folders (with its `.reference.pt` and `.pipeline.json`), as a downloader would:
`AutoModelForSeq2SeqLM`, `AutoModel` and `AutoTokenizer` with `trust_remote_code=True`; greedy and beam 5 on the
sentences token-identical to the reference; logits within 1e-5; `pipeline("translation", ...)` giving the reference's
translations; one `Seq2SeqTrainer` step. Writes `{variant: {check: "ok" | one-line error}}` as JSON to REPORT. Under
transformers 4 the one check is that loading refuses with one line naming the transformers release needed.
The standard folders (MarianMT, Blenderbot: `hf-bahdanau export --format transformers`) take every check with
`trust_remote_code=False`, on transformers 4 too, their logits within 1e-4 of the d2l model they came from, their
pipeline given the beams of their generation config (transformers 4's pipeline defaults to 4 beams over it).
The standard folder of each trained model in WORK/models (`--models`) is loaded the same way, without remote code,
and translates the test sentences greedy and with beam 5 in the reference's batches and generation settings
(`translate`, which made the reference too); the report counts the sentences whose ids differ.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
import transformers
from transformers import AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

TOLERANCE = 1e-5
STANDARD_TOLERANCE = 1e-4  # another architecture's kernels: the sums run in another order
VARIANT_NAMES = {  # folder name -> the table's column
    "GRU": "GRU",
    "LSTM": "LSTM",
    "bidirectional": "bidirectional",
    "shared_embeddings": "shared embeddings",
    "cGRU": "cGRU",
    "Transformer": "Transformer",
    "MarianMT": "MarianMT",
    "Blenderbot": "Blenderbot",
    "Blenderbot_tied": "Blenderbot tied",
}
STANDARD = ("MarianMT", "Blenderbot", "Blenderbot_tied")  # standard folders: no remote code
NO_TRANSLATION_TASK = "n/a: transformers 5 has no translation pipeline"  # not a failure (version_matrix.cell)
SEARCHES = {"greedy": 1, "beam 5": 5}  # the searches a trained model's outputs are compared on: name -> beams


def one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"[:200]


def check_generation(model, inputs, reference) -> str:
    with torch.no_grad():
        greedy = model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=reference["greedy"].shape[1] - 1)
        beam = model.generate(**inputs, num_beams=5, do_sample=False, max_new_tokens=reference["beam"].shape[1] - 1)
    for name, ids in (("greedy", greedy), ("beam 5", beam)):
        expected = reference["greedy" if name == "greedy" else "beam"]
        if ids.shape != expected.shape or not torch.equal(ids, expected):
            rows = (
                sum(not torch.equal(a, b) for a, b in zip(ids, expected, strict=True))
                if ids.shape == expected.shape
                else "all"
            )
            return f"{name} differs from the reference ({rows} of {len(expected)} sentences)"
    return "ok"


def check_logits(model, inputs, reference, tolerance: float) -> str:
    with torch.no_grad():
        logits = model(**inputs, decoder_input_ids=reference["beam"]).logits
    gap = (logits - reference["logits"]).abs().max().item()
    return "ok" if gap <= tolerance else f"logits differ by {gap:.2e}"


def check_training(folder: Path, tokenizer, texts: list[str], remote: bool) -> str:
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=remote)
    before = [parameter.detach().clone() for parameter in model.parameters()]
    features = [
        {"input_ids": tokenizer(text)["input_ids"], "labels": tokenizer(texts[(i + 1) % len(texts)])["input_ids"]}
        for i, text in enumerate(texts[:8])
    ]
    with tempfile.TemporaryDirectory() as output:
        args = Seq2SeqTrainingArguments(
            output_dir=output, max_steps=1, per_device_train_batch_size=8, report_to=[], save_strategy="no",
            learning_rate=1e-2, use_cpu=True, logging_strategy="no",
        )  # fmt: skip
        trainer = Seq2SeqTrainer(
            model=model, args=args, train_dataset=features, data_collator=DataCollatorForSeq2Seq(tokenizer, model=model)
        )
        loss = trainer.train().training_loss
    if not torch.isfinite(torch.tensor(loss)):
        return f"training loss {loss}"
    if all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)):
        return "the training step changed no weight"
    return "ok"


def probe(folder: Path, texts: list[str], remote: bool = True) -> dict[str, str]:
    """Every check of one folder; `remote`: whether it is loaded with its remote code (else it is a standard one)."""
    checks: dict[str, str] = {}

    def run(name: str, check) -> object:
        try:
            result = check()
        except Exception as error:  # noqa: BLE001 - every failure becomes the table's one line
            checks[name] = one_line(error)
            traceback.print_exc()
            return None
        checks[name] = result if isinstance(result, str) else "ok"
        return result

    reference = torch.load(folder.parent / f"{folder.name}.reference.pt")
    code = {"trust_remote_code": remote}
    model = run("AutoModelForSeq2SeqLM", lambda: AutoModelForSeq2SeqLM.from_pretrained(folder, **code))
    base = run("AutoModel", lambda: AutoModel.from_pretrained(folder, **code))
    if base is not None and type(base).__name__ == type(model).__name__:
        checks["AutoModel"] = f"AutoModel gave {type(base).__name__}, not the base model"
    tokenizer = run("AutoTokenizer", lambda: AutoTokenizer.from_pretrained(folder, **code))
    if model is None or tokenizer is None:
        return checks
    model.eval()
    inputs = tokenizer(texts, padding=True, return_tensors="pt")
    run("greedy and beam 5", lambda: check_generation(model, inputs, reference))
    run("logits", lambda: check_logits(model, inputs, reference, TOLERANCE if remote else STANDARD_TOLERANCE))
    expected = json.loads((folder.parent / f"{folder.name}.pipeline.json").read_text())

    def check_pipeline() -> str:
        if not remote and "translation" not in transformers.pipelines.SUPPORTED_TASKS:
            return NO_TRANSLATION_TASK  # transformers 5 has none; a standard folder brings no pipeline of its own
        # transformers 4's own pipeline searches with its defaults (4 beams) over the folder's generation config
        search = {} if remote else {"num_beams": model.generation_config.num_beams}
        translate = pipeline("translation", model=str(folder), trust_remote_code=remote, max_new_tokens=20, **search)
        found = [result["translation_text"] for result in translate(texts[: len(expected)])]
        return "ok" if found == expected else f"pipeline translations differ: {found[:1]} vs {expected[:1]}"

    run("pipeline", check_pipeline)
    run("Seq2SeqTrainer step", lambda: check_training(folder, tokenizer, texts, remote))
    return checks


def without_padding(ids: torch.Tensor, pad: int) -> list[int]:
    """One output's token ids `(length,)` without the padding after its end."""
    ids = ids.tolist()
    while ids and ids[-1] == pad:
        ids.pop()
    return ids


def encode(tokenizer, texts: list[str]) -> dict[str, torch.Tensor]:
    """`texts` as one padded batch: `input_ids` and `attention_mask` `(batch, src_len)`."""
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


@torch.no_grad()
def translate(model, tokenizer, texts: list[str], batches: list[list[int]], settings: dict) -> dict[str, list]:
    """The input ids of `texts` and each search's output ids (`SEARCHES`), one `generate()` a batch of `batches`
    (lists of indices into `texts`) with the generation `settings`; padding taken off every sentence's ids. Both
    sides of a trained model's check run this: the package's d2l model for the reference, the standard folder in
    each release."""
    pad = model.config.pad_token_id
    found: dict[str, list] = {name: [None] * len(texts) for name in ("input_ids", *SEARCHES)}
    for batch in batches:
        inputs = encode(tokenizer, [texts[index] for index in batch])
        outputs = {
            name: model.generate(**inputs, num_beams=beams, do_sample=False, **settings)  # (batch, tgt_len)
            for name, beams in SEARCHES.items()
        }
        for row, index in enumerate(batch):
            found["input_ids"][index] = inputs["input_ids"][row][inputs["attention_mask"][row].bool()].tolist()
            for name, ids in outputs.items():
                found[name][index] = without_padding(ids[row], pad)
    return found


@torch.no_grad()
def logits_of(model, tokenizer, texts: list[str], targets: list[list[int]]) -> torch.Tensor:
    """The logits `(batch, tgt_len, vocab)` of `targets` (decoder input ids, padded here) given `texts`."""
    pad = model.config.pad_token_id
    length = max(len(ids) for ids in targets)
    decoder_input_ids = torch.tensor([ids + [pad] * (length - len(ids)) for ids in targets])
    return model(**encode(tokenizer, texts), decoder_input_ids=decoder_input_ids).logits


def probe_trained(case: Path) -> dict:
    """A trained model's standard folder (`case/export`, no remote code) against the outputs of its d2l model
    (`case/reference.json`, `case/reference.logits.pt`): the same input ids, greedy and beam 5 in the same batches
    with the same generation settings, counting the sentences whose output ids differ; the logits of the first
    sentences' beam outputs. Returns `{"checks": {check: "ok" | error}, "sentences", "differing", "logits",
    "seconds"}`."""
    start = time.time()
    reference = json.loads((case / "reference.json").read_text())
    texts = reference["sentences"]
    try:
        model = AutoModelForSeq2SeqLM.from_pretrained(case / "export", trust_remote_code=False).eval()
        tokenizer = AutoTokenizer.from_pretrained(case / "export", trust_remote_code=False)
        found = translate(model, tokenizer, texts, reference["batches"], reference["generation"])
        first = reference["logit_sentences"]
        logits = logits_of(model, tokenizer, texts[:first], reference["beam 5"][:first])
    except Exception as error:  # noqa: BLE001 - the table's one line
        traceback.print_exc()
        return {"checks": {"run": one_line(error)}, "seconds": time.time() - start}
    differing = {
        name: [index for index, (ids, expected) in enumerate(zip(found[name], reference[name], strict=True))
               if ids != expected]
        for name in ("input_ids", *SEARCHES)
    }  # fmt: skip
    checks = {"load": "ok"}
    for name, rows in differing.items():
        what = "input ids (AutoTokenizer)" if name == "input_ids" else name
        checks[what] = "ok" if not rows else f"{len(rows)} of {len(texts)} sentences differ (the first: {rows[0]})"
    gap = (logits - torch.load(case / "reference.logits.pt")).abs().max().item()
    checks["logits"] = "ok" if gap <= STANDARD_TOLERANCE else f"logits differ by {gap:.2e}"
    return {
        "checks": checks,
        "sentences": len(texts),
        "differing": {name: len(rows) for name, rows in differing.items()},
        "logits": gap,
        "seconds": time.time() - start,
    }


def probe_v4(folder: Path) -> dict[str, str]:
    """transformers 4: loading must refuse with one line that names the transformers release needed."""
    try:
        AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
    except Exception as error:  # noqa: BLE001
        message = str(error).strip()
        if "transformers>=5" in message and "\n" not in message:
            return {"refused at load": "ok"}
        return {"refused at load": f"refused without naming the release needed: {one_line(error)}"}
    return {"refused at load": "loaded under transformers 4"}


def main() -> None:
    work, report = Path(sys.argv[1]), Path(sys.argv[2])
    if importlib.util.find_spec("hf_bahdanau") is not None:
        raise SystemExit("hf_bahdanau is importable here: the probe must run without the package")
    texts = json.loads((work / "sentences.json").read_text())
    transformers.logging.set_verbosity_error()
    results = {}
    for folder_name, column in VARIANT_NAMES.items():
        folder = work / "folders" / folder_name
        major = int(transformers.__version__.split(".")[0])
        if folder_name in STANDARD:
            results[column] = probe(folder, texts, remote=False)
        else:
            results[column] = probe_v4(folder) if major < 5 else probe(folder, texts)
    for case in sorted(path for path in (work / "models").glob("*") if path.is_dir()):  # one column a trained model
        results[case.name] = probe_trained(case)
    report.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
