"""Every module of the package uses transformers through its public API only: no name with a leading underscore
imported from transformers, no private member of its model, generation, cache, pipeline, config, tokenizer, Trainer
or callback classes used or overridden, but for what transformers' own model and pipeline files do themselves: the
hooks they define (`_init_weights`, a pipeline's `_forward`) and the private names they assign (capability flags such
as `_supports_sdpa`, `_tied_weights_keys`)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest
import transformers
from transformers import (
    DataCollatorForSeq2Seq,
    GenerationConfig,
    GenerationMixin,
    Pipeline,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    TrainerControl,
    TrainerState,
)
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.trainer_pt_utils import LengthGroupedSampler

PACKAGE = Path(__file__).resolve().parents[1] / "hf_bahdanau"
MODULES = sorted(PACKAGE.rglob("*.py"))
# The one private name every transformers model reads (516 of them in 5.24), with no public accessor: which attention
# implementation the config asks for; and the hook every model file defines.
KNOWN = {"_attn_implementation", "_init_weights"}
THEIR_CLASSES = (
    PreTrainedModel, GenerationMixin, GenerationConfig, PretrainedConfig, Pipeline, PreTrainedTokenizerBase, Cache,
    DynamicCache, EncoderDecoderCache, Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback, TrainerState,
    TrainerControl, DataCollatorForSeq2Seq, LengthGroupedSampler,
)  # fmt: skip


def private_members() -> set[str]:
    """The single-underscore members of the transformers classes the package builds on."""
    return {name for cls in THEIR_CLASSES for name in dir(cls) if name.startswith("_") and not name.startswith("__")}


@functools.cache
def what_transformers_subclasses_do() -> set[str]:
    """The private names transformers' own model files assign, in a class body or on `self` (`_supports_sdpa =
    True`, `self._tied_weights_keys = {...}`), and those its task pipelines define or assign (`def _forward(...)`,
    `_load_tokenizer = True`): what a model or a pipeline may do too."""
    assigned = re.compile(r"^\s+(?:self\.)?(_[a-z]\w*)\s*(?::[^=\n]+)?=[^=]", re.MULTILINE)
    defined = re.compile(r"^\s+def (_[a-z]\w*)\(", re.MULTILINE)
    root = Path(transformers.__file__).parent
    texts = [path.read_text("utf-8") for path in root.glob("models/*/modeling_*.py")]
    pipelines = [path.read_text("utf-8") for path in (root / "pipelines").glob("[!_]*.py") if path.name != "base.py"]
    return {name for text in texts + pipelines for name in assigned.findall(text)} | {
        name for text in pipelines for name in defined.findall(text)
    }


def defined_in_classes(tree: ast.AST) -> set[str]:
    """The methods and attributes that the classes of `tree` define (overrides, flags) or set on `self`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                targets = item.targets if isinstance(item, ast.Assign) else [getattr(item, "target", None)]
                names.update(target.id for target in targets if isinstance(target, ast.Name))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.attr for target in targets if isinstance(target, ast.Attribute)
                         and isinstance(target.value, ast.Name) and target.value.id == "self")  # fmt: skip
    return names


def private_uses(tree: ast.AST, theirs: set[str], allowed: set[str]) -> set[str]:
    """The private transformers names `tree` uses: imported with a leading underscore (or from a private module),
    accessed as an attribute, or defined (an override, or a flag set), but for the `allowed` ones."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "transformers":
            used.update(alias.name for alias in node.names if alias.name.startswith("_"))
            used.update(part for part in node.module.split(".") if part.startswith("_"))
        elif isinstance(node, ast.Attribute) and node.attr in theirs:
            used.add(node.attr)
    return (used | (defined_in_classes(tree) & theirs)) - allowed


def test_a_private_hook_an_override_and_a_private_import_are_found():
    code = ast.parse(
        "from transformers.generation.utils import _split\nmodel._prepare_special_tokens(config)\n"
        "class T(Trainer):\n    def _save_checkpoint(self, model, trial): ...\n    _supports_sdpa = True\n"
    )
    theirs = private_members()
    assert private_uses(code, theirs, set()) == {
        "_split",
        "_prepare_special_tokens",
        "_save_checkpoint",
        "_supports_sdpa",
    }
    assert private_uses(code, theirs, what_transformers_subclasses_do() | KNOWN) == {
        "_split",
        "_prepare_special_tokens",
        "_save_checkpoint",
    }
    assert {
        "_supports_sdpa",
        "_tied_weights_keys",
        "_is_stateful",
        "_keys_to_ignore_on_save",
    } <= what_transformers_subclasses_do()


@pytest.mark.parametrize("folder", sorted({path.relative_to(PACKAGE).parts[0] for path in MODULES}))
def test_every_module_uses_public_transformers_api(folder):
    theirs, allowed = private_members(), what_transformers_subclasses_do() | KNOWN
    found = {path.relative_to(PACKAGE).as_posix(): private_uses(ast.parse(path.read_text(encoding="utf-8")), theirs,
                                                                 allowed)
             for path in MODULES if path.relative_to(PACKAGE).parts[0] == folder}  # fmt: skip
    assert {path: names for path, names in found.items() if names} == {}
