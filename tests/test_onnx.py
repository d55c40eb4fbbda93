"""`export --format onnx` and the ONNX Runtime engine against torch, on tiny random models of both families (pre- and
post-norm Transformers; GRU, bidirectional LSTM and conditional GRU RNNs): the float32 graphs give torch's logits
(a Transformer's, also those of the standard folder they sit in), the engine's greedy and beam-5 hypotheses and
scores are the torch engine's, the int8 graphs run close to float32, the command line exports and translates, and
what the engine cannot do is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import TINY_CORPUS, error_of, make_model

from hf_bahdanau.cli import main
from hf_bahdanau.decoding.translator import Translator
from hf_bahdanau.errors import InputError
from hf_bahdanau.json_files import read_json
from hf_bahdanau.models.pipelines import save_for_pipeline

ort = pytest.importorskip("onnxruntime", reason="ONNX Runtime is not installed: pip install hf_bahdanau[onnx]")
pytest.importorskip("onnx", reason="onnx is not installed: pip install hf_bahdanau[onnx]")

from hf_bahdanau.decoding.engines.onnxruntime import OnnxRuntimeModel  # noqa: E402
from hf_bahdanau.decoding.export.onnx import export_onnx  # noqa: E402

MODELS = {
    "pre-norm": ("d2l_transformer", dict(norm_first=True)),
    "post-norm": ("d2l_transformer", dict(norm_first=False)),
    "gru": ("bahdanau", {}),
    "lstm": ("bahdanau", dict(rnn_type="lstm", bidirectional_encoder=True)),
    "cgru": ("bahdanau", dict(decoder_type="cgru", bidirectional_encoder=True, attention_type="general")),
}
TEXTS = [*TINY_CORPUS, "", "Hund", " ".join(TINY_CORPUS[:4])]


@pytest.fixture(scope="module")
def made(tokenizer, tmp_path_factory: pytest.TempPathFactory):
    """`made(name)`: the model `name` of `MODELS` (32 wide, en -> fr, its `</s>` logit raised so that hypotheses end at
    different lengths), its saved folder and its ONNX export, made once a module."""
    found: dict[str, tuple] = {}

    def make(name: str) -> tuple[torch.nn.Module, Path, Path]:
        if name not in found:
            model_type, config = MODELS[name]
            model = make_model(model_type, width=32, vocab_size=len(tokenizer), source_language="en",
                               target_language="fr", **config)  # fmt: skip
            with torch.no_grad():
                model.lm_head.weight[2] += 0.5 * model.lm_head.weight.mean(0)
                model.lm_head.weight[2] *= 2.0
            root = tmp_path_factory.mktemp(name)
            folder = save_for_pipeline(model, tokenizer, root / "model")
            found[name] = (model, folder, export_onnx(folder, root / "onnx"))
        return found[name]

    return make


def sources(tokenizer, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """`input_ids` and `attention_mask` `(batch, longest)` of `texts`, padded on the right."""
    rows = [tokenizer(text)["input_ids"] for text in texts]
    longest = max(map(len, rows))
    ids = torch.tensor([row + [0] * (longest - len(row)) for row in rows])
    return ids, torch.tensor([[1] * len(row) + [0] * (longest - len(row)) for row in rows])


def stepped_logits(export: Path, input_ids, attention_mask, targets, quantize: str | None = None) -> torch.Tensor:
    """The export's logits `(batch, tgt_len, vocab)` for `targets` `(batch, tgt_len)`, one decoder step a token, as
    the engine runs it."""
    rows = OnnxRuntimeModel(export, quantize).decoder_rows(input_ids, attention_mask, 1)
    return torch.stack([rows.step(targets[:, i : i + 1]) for i in range(targets.shape[1])], 1)


def teacher_forced(model, tokenizer) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Padded sources of three lengths, targets from the decoder start, and the torch model's logits for them."""
    input_ids, attention_mask = sources(tokenizer, [TINY_CORPUS[0], TINY_CORPUS[2], "Hund"])
    targets = torch.randint(3, len(tokenizer), (3, 6), generator=torch.Generator().manual_seed(0))
    targets[:, 0] = model.config.decoder_start_token_id
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=targets).logits
    return input_ids, attention_mask, targets, logits


@pytest.mark.parametrize("name", MODELS)
def test_float32_graphs_give_torch_s_logits(made, tokenizer, name):
    model, _, export = made(name)
    input_ids, attention_mask, targets, expected = teacher_forced(model, tokenizer)
    found = stepped_logits(export, input_ids, attention_mask, targets)
    torch.testing.assert_close(found, expected, atol=1e-4, rtol=0)
    if MODELS[name][0] == "d2l_transformer":  # the standard folder the graphs sit in computes them too
        from transformers import AutoModelForSeq2SeqLM

        standard = AutoModelForSeq2SeqLM.from_pretrained(export).eval()
        assert type(standard).__name__ == ("BlenderbotForConditionalGeneration" if name == "pre-norm" else
                                           "MarianMTModel")  # fmt: skip
        with torch.no_grad():
            logits = standard(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=targets).logits
        torch.testing.assert_close(found, logits, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["pre-norm", "post-norm"])
def test_the_merged_decoder_has_optimum_s_interface_and_branches(made, tokenizer, name):
    """transformers.js's feeds: empty pasts and `use_cache_branch` false at the first step, then the presents as the
    pasts, but the cross-attention keys and values of the first step kept (a cached step gives empty ones); given
    back, they give the logits that projecting them again (`use_cache_branch` false) gives."""
    model, _, export = made(name)
    config, layers = model.config, model.config.decoder_layers
    encoder = ort.InferenceSession(str(export / "onnx" / "encoder_model.onnx"))
    decoder = ort.InferenceSession(str(export / "onnx" / "decoder_model_merged.onnx"))
    kv = [f"{i}.{part}.{kind}" for i in range(layers) for part in ("decoder", "encoder") for kind in ("key", "value")]
    assert [value.name for value in encoder.get_inputs()] == ["input_ids", "attention_mask"]
    assert [value.name for value in encoder.get_outputs()] == ["last_hidden_state"]
    assert sorted(value.name for value in decoder.get_inputs()) == sorted(
        ["encoder_attention_mask", "input_ids", "encoder_hidden_states", "use_cache_branch",
         *(f"past_key_values.{name}" for name in kv)]
    )  # fmt: skip
    assert sorted(value.name for value in decoder.get_outputs()) == sorted(["logits", *(f"present.{n}" for n in kv)])
    flag = next(value for value in decoder.get_inputs() if value.name == "use_cache_branch")
    assert (flag.type, flag.shape) == ("tensor(bool)", [1])
    input_ids, attention_mask, targets, expected = teacher_forced(model, tokenizer)
    (hidden,) = encoder.run(None, {"input_ids": input_ids.numpy(), "attention_mask": attention_mask.numpy()})
    heads, head_dim = config.attention_heads, config.d_model // config.attention_heads
    feeds = {"encoder_attention_mask": attention_mask.numpy(), "encoder_hidden_states": hidden,
             **{f"past_key_values.{n}": torch.zeros(3, heads, 0, head_dim).numpy() for n in kv}}  # fmt: skip
    names = [value.name for value in decoder.get_outputs()]
    for step, cached in enumerate([False, True, False]):
        outputs = dict(zip(names, decoder.run(None, {**feeds, "input_ids": targets[:, step : step + 1].numpy(),
                                                       "use_cache_branch": [cached]}), strict=True))  # fmt: skip
        torch.testing.assert_close(torch.from_numpy(outputs["logits"][:, 0]), expected[:, step], atol=1e-4, rtol=0)
        assert outputs["present.0.decoder.key"].shape == (3, heads, step + 1, head_dim)
        assert outputs["present.0.encoder.key"].shape == (3, heads, 0 if cached else input_ids.shape[1], head_dim)
        feeds.update({f"past_key_values.{n}": outputs[f"present.{n}"] for n in kv if not cached or "decoder" in n})


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("options", [dict(num_beams=1), dict(num_beams=5, n_best=2)], ids=["greedy", "beam-5"])
def test_the_engine_searches_as_the_torch_engine(made, name, options):
    """The same hypotheses, token for token (some ended by `</s>`, some by their length bound), scored alike."""
    _, folder, export = made(name)
    expected = Translator.from_folder(folder).translate(TEXTS, **options)
    found = Translator.from_folder(export, engine="onnxruntime").translate(TEXTS, **options)
    assert [[h.ids for h in t.hypotheses] for t in found] == [[h.ids for h in t.hypotheses] for t in expected]
    assert [[h.text for h in t.hypotheses] for t in found] == [[h.text for h in t.hypotheses] for t in expected]
    scores = [(h.score, g.score) for t, u in zip(found, expected, strict=True)
              for h, g in zip(t.hypotheses, u.hypotheses, strict=True)]  # fmt: skip
    assert all((a is None) == (b is None) and (a is None or abs(a - b) < 1e-4) for a, b in scores)
    lengths = {len(h.ids) for t in expected for h in t.hypotheses}
    assert len(lengths) > 2  # hypotheses of several lengths: rows left the batch at different steps


@pytest.mark.parametrize("name", ["pre-norm", "lstm"])
def test_int8_graphs_run_close_to_float32(made, tokenizer, name):
    """int8 weights move each logit by a little of the logits' spread, and the first token of most translations is
    float32's (a random model's later tokens part at its many near ties)."""
    model, _, export = made(name)
    input_ids, attention_mask, targets, expected = teacher_forced(model, tokenizer)
    found = stepped_logits(export, input_ids, attention_mask, targets, quantize="int8")
    assert (found - expected).abs().max() < 0.25 * expected.std()
    float32 = Translator.from_folder(export, engine="onnxruntime").translate(TEXTS, num_beams=1)
    int8 = Translator.from_folder(export, engine="onnxruntime", quantize="int8").translate(TEXTS, num_beams=1)
    agree = [a.hypotheses[0].ids[:1] == b.hypotheses[0].ids[:1] for a, b in zip(float32, int8, strict=True)]
    assert sum(agree) >= 0.8 * len(TEXTS)


def test_the_export_folders_hold_transformers_js_s_layout(made):
    _, _, transformer = made("pre-norm")
    _, _, rnn = made("gru")
    graphs = {"encoder_model", "decoder_model_merged"}
    expected = {f"{name}{suffix}.onnx" for name in graphs for suffix in ("", "_quantized")} | {"decoding.json"}
    assert {path.name for path in (transformer / "onnx").iterdir()} == expected
    assert read_json(transformer / "config.json")["model_type"] == "blenderbot"
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "model.safetensors"):
        assert (transformer / name).is_file()
    expected = {f"{name}{suffix}.onnx" for name in ("encoder_model", "decoder_model") for suffix in ("", "_quantized")}
    assert {path.name for path in (rnn / "onnx").iterdir()} == expected | {"decoding.json"}
    described = read_json(rnn / "onnx" / "decoding.json")
    assert (described["decoder_start_token_id"], described["eos_token_id"], described["pad_token_id"]) == (1, 2, 0)
    assert described["state"] == {"new_hidden": "hidden"}
    assert "auto_map" not in read_json(rnn / "config.json")  # the export has no code to point to


def test_threads_set_onnx_runtime_s_intra_op_threads(made):
    _, _, export = made("gru")
    model = Translator.from_folder(export, engine="onnxruntime", threads=1).model
    assert model.encoder.get_session_options().intra_op_num_threads == 1
    assert model.decoder.get_session_options().intra_op_num_threads == 1


def test_the_command_line_exports_and_translates(made, tmp_path, capsys):
    _, folder, _ = made("pre-norm")
    export = tmp_path / "onnx"
    assert main(["export", "--model", str(folder), "--format", "onnx", "--output", str(export)]) == 0
    assert capsys.readouterr().out == f"{export}\n"
    options = ["--num-beams", "3", "--n-best", "2", "--scores", "--threads", "1", *TEXTS[:4]]
    outputs = {}
    for engine, model in (("torch", folder), ("onnxruntime", export)):
        assert main(["translate", "--model", str(model), "--engine", engine, *options]) == 0
        outputs[engine] = capsys.readouterr().out
    assert outputs["onnxruntime"] == outputs["torch"] and len(outputs["torch"].splitlines()) == 8
    assert main(["translate", "--model", str(export), "--engine", "onnxruntime", "--quantize", "int8", *options]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 8


def test_what_the_engine_cannot_do_is_refused_in_one_line(made, tmp_path, caplog):
    _, folder, export = made("gru")
    translator = Translator.from_folder(export, engine="onnxruntime")
    for options in (dict(alignments=True), dict(glossary={"Hund": "dog"}, num_beams=2), dict(avoid=["dog"])):
        with pytest.raises(InputError, match="ONNX Runtime engine translates without") as refused:
            translator.translate(["Ein Hund."], **options)
        assert "\n" not in str(refused.value)
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("Hund\tdog\n", encoding="utf-8")
    argv = ["translate", "--model", str(export), "--engine", "onnxruntime"]
    assert "ONNX Runtime cannot place" in error_of([*argv, "--glossary", str(glossary)], caplog)
    assert "gives no attention weights" in error_of([*argv, "--alignments"], caplog)
    argv = ["translate", "--model", str(folder), "--engine", "onnxruntime"]
    assert "is no ONNX export of this package" in error_of(argv, caplog)
    for family in ("gru", "pre-norm"):  # an RNN's export records its model type, a Transformer's is Blenderbot's
        argv = ["translate", "--model", str(made(family)[2]), "--engine", "torch", "Ein Hund."]
        assert error_of(argv, caplog).endswith("is an ONNX export: translate with it through --engine onnxruntime")
    argv = ["export", "--model", str(folder), "--format", "onnx", "--output", str(tmp_path / "x"), "--quantization"]
    assert "--quantization applies to --format ctranslate2" in error_of([*argv, "int8"], caplog)
    standard = made("pre-norm")[2]  # a Blenderbot folder, no model of this package's
    argv = ["export", "--model", str(standard), "--format", "onnx", "--output", str(tmp_path / "y")]
    expected = "holds a 'blenderbot' model: only bahdanau and d2l_transformer models export to ONNX"
    assert expected in error_of(argv, caplog) and not (tmp_path / "y").exists()


def test_a_transformer_without_a_standard_equivalent_is_refused_in_one_line(tokenizer, tmp_path, caplog):
    model = make_model("d2l_transformer", width=32, vocab_size=len(tokenizer), norm_first=True,
                       tie_word_embeddings=True, tie_encoder_decoder_embeddings=False)  # fmt: skip
    folder = save_for_pipeline(model, tokenizer, tmp_path / "model")
    argv = ["export", "--model", str(folder), "--format", "onnx", "--output", str(tmp_path / "onnx")]
    assert "has no exact standard equivalent" in error_of(argv, caplog)
    assert not (tmp_path / "onnx").exists()


@pytest.mark.slow
def test_evaluate_and_the_server_translate_with_the_engine(made, tatoeba_tsv, tmp_path, capsys):
    """`evaluate --engine onnxruntime` writes the torch engine's hypotheses; the server's model translates as it."""
    from hf_bahdanau.serving.model import Decoding, ServedModel

    _, folder, export = made("gru")
    found = {}
    for engine, model in (("torch", folder), ("onnxruntime", export)):
        output = tmp_path / f"{engine}.txt"
        argv = ["evaluate", "--model", str(model), "--engine", engine, "--data", str(tatoeba_tsv), "--src-lang", "en",
                "--tgt-lang", "fr", "--split", "test", "--max-samples", "6", "--num-beams", "2",
                "--output", str(output)]  # fmt: skip
        assert main(argv) == 0 and "BLEU = " in capsys.readouterr().out
        found[engine] = output.read_text(encoding="utf-8")
    assert found["onnxruntime"] == found["torch"] and len(found["torch"].splitlines()) == 6
    expected = Translator.from_folder(folder).translate(TEXTS[:3])
    served = ServedModel(str(export), Decoding(engine="onnxruntime", threads=1))
    assert served.translate(TEXTS[:3]) == [[translation.text] for translation in expected]


def test_a_server_on_the_engine_refuses_a_glossary_in_one_line_and_translates_the_rest(made):
    """An ONNX export holds no torch model to place terms with: a request with a glossary gets 400, saying why."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from hf_bahdanau.serving.app import Settings, build_app
    from hf_bahdanau.serving.model import Decoding

    _, folder, export = made("gru")
    settings = Settings(models=(str(export),), decoding=Decoding(engine="onnxruntime", num_beams=2, threads=1))
    request = {"q": TEXTS[0], "source": "en", "target": "fr"}
    with TestClient(build_app(settings)) as client:
        refused = client.post("/translate", json={**request, "glossary": {"dog": "chien"}})
        answered = client.post("/translate", json=request)
    assert refused.status_code == 400
    assert refused.json() == {"error": "Invalid request: a glossary needs the torch or ctranslate2 engine, and this "
                              "server runs onnxruntime"}  # fmt: skip
    expected = Translator.from_folder(folder).translate(TEXTS[:1], num_beams=2)[0].text
    assert answered.status_code == 200 and answered.json()["translatedText"] == expected


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["d2l_transformer", "bahdanau"])
def test_the_engines_benchmark_puts_every_engine_of_a_trained_model_side_by_side(
    trained_folder, model_type, tmp_path, run_script, capsys
):
    model = trained_folder(model_type, tmp_path / "model")
    run_script("benchmark_engines", "--model", str(model), "--max-samples", "12", "--rounds", "1")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line]
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]] for line in lines[1:]}
    engines = ["torch fp32", "torch int8", "ONNX Runtime fp32", "ONNX Runtime int8"]
    if model_type == "d2l_transformer":  # CTranslate2 has no RNN decoder
        engines[2:2] = ["CTranslate2 fp32", "CTranslate2 int8"]
    assert list(rows) == engines
    for exact in [name for name in engines if name.endswith("fp32")]:
        speed, ratio, same, bleu, change = rows[exact]
        assert same == "100.0%" and change == "+0.00" and bleu == rows["torch fp32"][3]
    assert all(float(row[0]) > 0 and row[1].endswith("x") for row in rows.values())
