"""A saved folder's settings and tokenizer read as data, with neither torch nor transformers: what the CTranslate2
engine reads of an export, so that translating with it starts without importing either.

- `Settings`: a config or generation config (a JSON object) as attributes; a setting the file leaves out reads as
  None, as an unset generation parameter does in transformers' `GenerationConfig`.
- `read_tokenizer`: the folder's tokenizer. Where its `tokenizer_config.json` asks for nothing beyond its
  `tokenizer.json` (the tokenizers this package trains: `TokenizersBackend`, named special tokens that are special
  tokens of tokenizer.json, no clean-up of spaces, no legacy token files), a `FolderTokenizer` on the `tokenizers`
  library alone, which gives the token ids and texts of transformers' tokenizer; for any other, transformers'
  `AutoTokenizer`.
- `check_model_folder`: that a folder holds a saved model's config.json, so that a wrong path answers at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_bahdanau.errors import InputError
from hf_bahdanau.json_files import read_json

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerBase

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")
# What tokenizer_config.json may hold for `FolderTokenizer` to read the folder as transformers reads it.
# `is_local` and `local_files_only`: where a tokenizer saved again was loaded from, which transformers records and
# reads back as unused arguments.
PLAIN_SETTINGS = {"tokenizer_class", "backend", "model_max_length", "clean_up_tokenization_spaces", "padding_side",
                  "truncation_side", "is_local", "local_files_only", *SPECIAL_TOKENS}  # fmt: skip
PLAIN_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")  # transformers 5: one class, two names
LEGACY_FILES = ("special_tokens_map.json", "added_tokens.json")  # transformers reads them on top of the config


class Settings:
    """A config or generation config saved as a JSON object, as attributes; a setting it leaves out reads as None."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:  # only called for a name the file leaves out
        if name.startswith("_"):
            raise AttributeError(name)
        return None


class FolderTokenizer:
    """A `tokenizers.Tokenizer` answering the calls the CTranslate2 engine makes of a transformers tokenizer, as
    transformers' `TokenizersBackend` answers them for a tokenizer whose settings are `PLAIN_SETTINGS`: encoding
    (`</s>` appended by tokenizer.json's post-processor) without truncation or padding, decoding without clean-up."""

    def __init__(self, tokenizer: Tokenizer, settings: Mapping[str, Any]) -> None:
        tokenizer.no_truncation()  # as transformers encodes without truncation=True
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self.model_max_length: int = settings["model_max_length"]
        self.padding_side: str = settings.get("padding_side", "right")  # where a batch of ids is padded
        for name in SPECIAL_TOKENS:
            token = settings.get(name)
            setattr(self, name, token)
            setattr(self, f"{name}_id", None if token is None else tokenizer.token_to_id(token))

    @property
    def backend_tokenizer(self) -> Tokenizer:
        """The `tokenizers.Tokenizer` it answers with, as transformers' tokenizers name theirs."""
        return self._tokenizer

    def __call__(
        self, text: str | None = None, *, text_target: str | None = None, add_special_tokens: bool = True,
        verbose: bool = True,
    ) -> dict[str, list[int]]:  # fmt: skip
        """`{"input_ids": ...}` of `text`, or of `text_target` (the same tokenizer for both sides). `verbose` is taken
        as transformers takes it; this tokenizer gives no warning about a sequence over `model_max_length`."""
        encoding = self._tokenizer.encode(
            text if text is not None else text_target, add_special_tokens=add_special_tokens
        )
        return {"input_ids": encoding.ids}

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | list[str]:
        if isinstance(ids, int):
            return self._tokenizer.id_to_token(ids)
        return [self._tokenizer.id_to_token(int(index)) for index in ids]

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int]:
        """Each token's id; the unk token's for a token the vocabulary lacks."""
        if isinstance(tokens, str):
            index = self._tokenizer.token_to_id(tokens)
            return self.unk_token_id if index is None else index
        return [self.convert_tokens_to_ids(token) for token in tokens]


def reads_alone(folder: Path, tokenizer: Tokenizer, settings: Mapping[str, Any]) -> bool:
    """Whether transformers reads `folder`'s tokenizer as `tokenizer` (its tokenizer.json) and `settings` (its
    tokenizer_config.json) say: nothing in the settings or beside them that transformers would act on."""
    if settings.get("tokenizer_class") not in PLAIN_CLASSES or not set(settings) <= PLAIN_SETTINGS:
        return False
    if settings.get("clean_up_tokenization_spaces") or not isinstance(settings.get("model_max_length"), int):
        return False
    if any((folder / name).exists() for name in LEGACY_FILES):
        return False
    # transformers adds each named special token as a special AddedToken(token, normalized=False): already so
    added = {token.content: token for token in tokenizer.get_added_tokens_decoder().values()}
    for name in SPECIAL_TOKENS:
        token = settings.get(name)
        found = added.get(token) if isinstance(token, str) else None
        if token is not None and (found is None or not found.special or found.normalized or found.lstrip
                                  or found.rstrip or found.single_word):  # fmt: skip
            return False
    return True


def read_tokenizer(folder: str | Path) -> FolderTokenizer | PreTrainedTokenizerBase:
    """The tokenizer of `folder` (its tokenizer.json and tokenizer_config.json): a `FolderTokenizer` where it reads
    the folder as transformers does (`reads_alone`), else transformers' own (no code from the folder runs)."""
    from tokenizers import Tokenizer

    folder = Path(folder)
    settings = read_json(folder / "tokenizer_config.json")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    if reads_alone(folder, tokenizer, settings):
        return FolderTokenizer(tokenizer, settings)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, trust_remote_code=False)


def check_model_folder(path: str) -> Path:
    """`path` as a folder, if it holds a saved model's config.json (else a one-line error naming it)."""
    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise InputError(f"{folder} is not a saved model folder (no config.json)")
    return folder


__all__ = ["FolderTokenizer", "Settings", "check_model_folder", "read_tokenizer", "reads_alone"]
