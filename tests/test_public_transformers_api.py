"""The code a saved folder ships (`hf_bahdanau/models/`) and the package's search (`hf_bahdanau/decoding/`) use
transformers through its public API only: no name with a leading underscore imported from transformers, and no
private member of its model, generation, cache, pipeline, config or tokenizer classes used where the package does not
define it itself (an override of a hook, such as `_init_weights`, is the package's own)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from transformers import (
    GenerationConfig,
    GenerationMixin,
    Pipeline,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache

PACKAGE = Path(__file__).resolve().parents[1] / "hf_bahdanau"
CHECKED = ("models", "decoding")
# The one private name every transformers model reads (516 of them in 5.24), with no public accessor: which attention
# implementation the config asks for.
KNOWN = {"_attn_implementation"}


def private_members() -> set[str]:
    """The single-underscore members of the transformers classes the package's models, search and pipeline build on."""
    classes = (PreTrainedModel, GenerationMixin, GenerationConfig, PretrainedConfig, Pipeline, PreTrainedTokenizerBase,
               Cache, DynamicCache, EncoderDecoderCache)  # fmt: skip
    return {name for cls in classes for name in dir(cls) if name.startswith("_") and not name.startswith("__")}


def defined_names(tree: ast.AST) -> set[str]:
    """The functions, classes and attributes that `tree` defines (assigns)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        names.update(target.id if isinstance(target, ast.Name) else target.attr for target in targets
                     if isinstance(target, (ast.Name, ast.Attribute)))  # fmt: skip
    return names


def private_uses(tree: ast.AST, theirs: set[str], ours: set[str]) -> set[str]:
    """The private transformers names `tree` uses: imported with a leading underscore (or from a private module), or
    accessed as an attribute that is transformers' and not the package's."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "transformers":
            used.update(alias.name for alias in node.names if alias.name.startswith("_"))
            used.update(part for part in node.module.split(".") if part.startswith("_"))
        elif isinstance(node, ast.Attribute) and node.attr in theirs and node.attr not in ours:
            used.add(node.attr)
    return used - KNOWN


def test_a_private_hook_and_a_private_import_are_found():
    code = ast.parse("from transformers.generation.utils import _split\nmodel._prepare_special_tokens(config)\n")
    assert private_uses(code, private_members(), set()) == {"_split", "_prepare_special_tokens"}
    assert private_uses(code, private_members(), {"_prepare_special_tokens"}) == {"_split"}  # an override of ours


@pytest.mark.parametrize("folder", CHECKED)
def test_the_shipped_models_and_the_search_use_public_transformers_api(folder):
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(PACKAGE.rglob("*.py"))}
    ours = set().union(*(defined_names(tree) for tree in trees.values()))
    theirs = private_members()
    found = {path.relative_to(PACKAGE).as_posix(): private_uses(tree, theirs, ours) for path, tree in trees.items()
             if path.relative_to(PACKAGE).parts[0] == folder}  # fmt: skip
    assert {path: names for path, names in found.items() if names} == {}
