"""What `hf-bahdanau translate` imports to start: the model's libraries, not the corpus ones (`datasets`, pandas,
pyarrow), which cost a second or more of start-up on a busy machine; with `--engine ctranslate2`, neither torch nor
the models' code, which cost ten: the export's config, generation config and tokenizer are read as data
(`decoding/folder_data.py`), and give what transformers' own classes give."""

import json
import shutil
import subprocess
import sys

import pytest
from helpers import TINY_CORPUS, make_model
from transformers import AutoTokenizer, GenerationConfig

from hf_bahdanau.data.tokenization import MODELS, train_tokenizer
from hf_bahdanau.decoding.folder_data import FolderTokenizer, Settings, read_tokenizer
from hf_bahdanau.decoding.settings import SearchSettings

HEAVY_UNUSED = ("datasets", "pandas", "pyarrow")
TORCH_AND_MODELS = ("torch", "transformers.modeling_utils", "hf_bahdanau.models.pipelines")
TEXTS = [
    "Ein Mann fährt Fahrrad.",
    "",
    "  two  dogs ",
    "Zwei </s> Hunde<unk>",
    "日本 Straße",
    "Cafe\u0301 .",
    "a" * 300,
]


@pytest.fixture(scope="module")
def model(tokenizer):
    return make_model("d2l_transformer", vocab_size=len(tokenizer))


def translate_in_a_process(tmp_path, watched, *runs: list[str]) -> tuple[list[str], str, str]:
    """`hf-bahdanau translate ARGS` for each of `runs` in turn, in one process of its own, started as pip's console
    script starts it (which names the process), with "a cat ." on standard input: the output lines, the line naming
    which of `watched` it imported with the exit statuses, and stderr."""
    script = tmp_path / "hf-bahdanau"
    script.write_text(
        "import json, sys\nfrom hf_bahdanau_cli import main\nstatuses = []\n"
        "for args in json.loads(sys.argv.pop()):\n"
        "    sys.argv[1:] = ['translate', *args]\n"
        "    statuses.append(main())\n"
        f"print('imported:', sorted(set({watched!r}) & set(sys.modules)), *statuses)\n"
    )
    result = subprocess.run([sys.executable, str(script), json.dumps(runs)], input="a cat .\n", capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    *translations, imported = result.stdout.splitlines() or [""]
    return translations, imported, result.stderr


def test_translating_one_sentence_imports_no_corpus_library(folder, tmp_path):
    args = ["--model", str(folder), "--num-beams", "1", "--max-new-tokens", "3"]
    # An argument, then standard input.
    translations, imported, stderr = translate_in_a_process(tmp_path, HEAVY_UNUSED, [*args, "a dog runs ."], args)
    assert imported == "imported: [] 0 0", stderr[-3000:]
    assert len(translations) == 2
    assert "Loading weights" not in stderr and "\r" not in stderr  # its log, to a pipe: no progress bar


def test_the_collector_pauses_while_the_libraries_are_first_imported(monkeypatch):
    """`_prepare_libraries` imports torch and transformers with the garbage collector off, then freezes what they made
    and turns it back on, also when an import fails; where they are imported already, the collector stays on. (What
    it froze here stays frozen, as in a process after its first command.)"""
    import gc

    import transformers.modeling_utils  # noqa: F401

    from hf_bahdanau.cli import _uncollected_imports

    with _uncollected_imports():  # the libraries are imported
        assert gc.isenabled()
    monkeypatch.delitem(sys.modules, "transformers.modeling_utils")  # as before the first command
    frozen = gc.get_freeze_count()
    with pytest.raises(ImportError), _uncollected_imports():
        assert not gc.isenabled()
        raise ImportError("a library that fails to import")
    assert gc.isenabled() and gc.get_freeze_count() > frozen


def test_translating_with_ctranslate2_imports_neither_torch_nor_the_models(folder, tmp_path):
    """An export, and a model folder with its export cached: the translation that CTranslate2 gives with
    transformers' tokenizer, without importing torch, transformers' modeling code or the shipped pipeline."""
    pytest.importorskip("ctranslate2")
    from hf_bahdanau.decoding.engines.ctranslate2 import CTranslate2Translator
    from hf_bahdanau.decoding.export.ctranslate2 import cached_export, export_ctranslate2
    from hf_bahdanau.decoding.translator import Translator

    export = export_ctranslate2(folder, tmp_path / "ct2")
    engine = CTranslate2Translator(export)
    engine.tokenizer = AutoTokenizer.from_pretrained(export)  # transformers' own: the reference
    expected = Translator(engine, engine="ctranslate2").translate([TEXTS[0]], num_beams=1)[0].text
    cached = shutil.copytree(folder, tmp_path / "model")
    cached_export(cached)  # made here: the command finds it
    runs = [
        ["--model", str(model), "--engine", "ctranslate2", "--num-beams", "1", TEXTS[0]] for model in (export, cached)
    ]
    translations, imported, stderr = translate_in_a_process(tmp_path, TORCH_AND_MODELS, *runs)
    assert imported == "imported: [] 0 0", stderr[-3000:]
    assert translations == [expected, expected] and expected


@pytest.mark.parametrize("kind", MODELS)
def test_a_folder_tokenizer_gives_transformers_ids_and_texts(kind, tmp_path):
    """Also for a tokenizer loaded from a folder and saved again (as `distill` saves its teacher's), whose settings
    then say where it was loaded from."""
    train_tokenizer(TINY_CORPUS, 120, model=kind, min_freq=1).save_pretrained(tmp_path / "first")
    AutoTokenizer.from_pretrained(tmp_path / "first").save_pretrained(tmp_path)
    mine, theirs = read_tokenizer(tmp_path), AutoTokenizer.from_pretrained(tmp_path)
    assert isinstance(mine, FolderTokenizer)
    assert mine.model_max_length == theirs.model_max_length
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "unk_token_id"):
        assert getattr(mine, name) == getattr(theirs, name), name
    for text in TEXTS:
        ids = theirs(text, verbose=False)["input_ids"]
        assert mine(text, verbose=False)["input_ids"] == ids, text
        plain = theirs(text_target=text, add_special_tokens=False)["input_ids"]
        assert mine(text_target=text, add_special_tokens=False)["input_ids"] == plain, text
        tokens = theirs.convert_ids_to_tokens(ids)
        assert mine.convert_ids_to_tokens(ids) == tokens
        assert mine.convert_tokens_to_ids([*tokens, "never-a-token"]) == theirs.convert_tokens_to_ids(
            [*tokens, "never-a-token"]
        )
    every_id = list(range(len(theirs)))  # the special tokens among them
    for skip in (True, False):
        assert mine.decode(every_id, skip_special_tokens=skip) == theirs.decode(every_id, skip_special_tokens=skip)


@pytest.mark.parametrize(
    "settings", [{"clean_up_tokenization_spaces": True}, {"add_eos_token": True}, {"split_special_tokens": True}]
)
def test_a_tokenizer_asking_for_more_than_its_file_is_read_by_transformers(settings, tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), **settings}))
    assert not isinstance(read_tokenizer(tmp_path), FolderTokenizer)
    (tmp_path / "special_tokens_map.json").write_text("{}")
    config.write_text(json.dumps({key: value for key, value in json.loads(config.read_text()).items()
                                  if key not in settings}))  # fmt: skip
    assert not isinstance(read_tokenizer(tmp_path), FolderTokenizer)  # a legacy file transformers reads


def test_saved_settings_read_as_transformers_generation_config_reads_them(folder):
    generation = json.loads((folder / "generation_config.json").read_text())
    read = (*SearchSettings.__dataclass_fields__, *SearchSettings.UNSUPPORTED, "max_length", "min_new_tokens")
    for values, reference in ((generation, GenerationConfig.from_pretrained(folder)), ({}, GenerationConfig())):
        settings = Settings(values)
        assert {name: getattr(settings, name) for name in read} == {name: getattr(reference, name) for name in read}
