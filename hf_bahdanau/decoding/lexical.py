"""What a call's glossary, prefix and words to avoid ask of each source's translation, as text and as token ids.

- `glossary`: a `Glossary` (or a mapping source term -> target term); the terms whose source side occurs in a text
  (`Glossary.terms_for`) must appear in its translation, as their target side.
- `prefix`: the text each translation starts with (one string for every text, or one per text).
- `avoid`: words or phrases no translation may contain: each as written and with its first letter upper-cased (as
  at the start of a sentence).

A phrase becomes the token ids the tokenizer gives it as target text in the middle of a sentence. A phrase with
letters the model cannot write (unknown tokens) cannot be required: it is left out with a warning; a prefix with
such letters is forced without them, with a warning. A glossary term or prefix that holds a phrase to avoid is
refused.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hf_bahdanau.errors import InputError

from .glossary import Glossary, Term

if TYPE_CHECKING:  # the constraints are the torch engine's: imported where built
    import torch
    from transformers import PreTrainedTokenizerBase

    from .constraints import Constraints
    from .folder_data import FolderTokenizer

logger = logging.getLogger(__name__)


@dataclass
class LexicalOptions:
    """A call's glossary, prefixes (one per text) and phrases to avoid, with their token ids."""

    tokenizer: PreTrainedTokenizerBase | FolderTokenizer
    glossary: Glossary | None = None
    prefixes: list[str] | None = None
    avoid: list[str] = field(default_factory=list)
    _ids: dict[str, list[int]] = field(default_factory=dict, repr=False)
    _unwritable: set[str] = field(default_factory=set, repr=False)
    _continues_word: dict[int, torch.Tensor | None] = field(default_factory=dict, repr=False)

    @classmethod
    def of(
        cls,
        tokenizer: PreTrainedTokenizerBase | FolderTokenizer,
        count: int,
        glossary: Glossary | Mapping[str, str] | None = None,
        prefix: str | Sequence[str] | None = None,
        avoid: Sequence[str] | None = None,
    ) -> LexicalOptions | None:
        """The options of a call on `count` texts, checked (InputError); None where none is asked for."""
        if glossary is not None and not isinstance(glossary, Glossary):
            glossary = Glossary.from_pairs(glossary)
        if isinstance(prefix, str):
            prefix = [prefix] * count
        elif prefix is not None:
            prefix = list(prefix)
            if len(prefix) != count or not all(isinstance(text, str) for text in prefix):
                raise InputError(f"prefix: one string, or a list of {count} strings (one per text)")
        if isinstance(avoid, str) or (avoid is not None and not all(isinstance(text, str) for text in avoid)):
            raise InputError("avoid: a list of words or phrases")
        avoid = [" ".join(text.split()) for text in avoid or ()]
        if any(not text for text in avoid):
            raise InputError("avoid: an empty word or phrase")
        if glossary is None and not any(prefix or ()) and not avoid:
            return None
        options = cls(tokenizer, glossary, prefix, avoid)
        options.check_agreement()
        return options

    def check_agreement(self) -> None:
        """Refuse a glossary term or prefix that holds a phrase to avoid (as the tokenizer writes both): the search
        could never place the term, nor leave the phrase out of the prefix."""
        avoided = self.avoided_forms()
        required = [(f"the glossary term {term.source!r} -> {term.target!r}", term.target)
                    for term in (self.glossary.terms if self.glossary else ())]  # fmt: skip
        required += [(f"the prefix {text!r}", text) for text in dict.fromkeys(self.prefixes or ()) if text]
        for what, text in required:
            ids = self.ids(text)
            for phrase, banned in avoided.items():
                if any(ids[start : start + len(banned)] == banned for start in range(len(ids) - len(banned) + 1)):
                    raise InputError(f"{what} holds {phrase!r}, a phrase to avoid: leave out one of the two")

    @property
    def places_terms(self) -> bool:
        """Whether some translation must hold glossary terms (a beam search's work)."""
        return self.glossary is not None

    def terms(self, text: str) -> list[Term]:
        """The glossary terms that apply to `text`."""
        return [] if self.glossary is None else self.glossary.terms_for(text)

    def ids(self, phrase: str) -> list[int]:
        """The token ids of `phrase` as target text in the middle of a sentence (no special tokens)."""
        if phrase not in self._ids:
            self._ids[phrase] = self.tokenizer(text_target=phrase, add_special_tokens=False)["input_ids"]
        return self._ids[phrase]

    def writable(self, phrase: str) -> bool:
        """Whether the model can write `phrase` (no unknown token in it); warns once for a phrase it cannot."""
        ids = self.ids(phrase)
        if ids and self.tokenizer.unk_token_id not in ids:
            return True
        if phrase not in self._unwritable:
            self._unwritable.add(phrase)
            logger.warning("the glossary term %r has letters the model cannot write: it is not required", phrase)
        return False

    def avoided_forms(self) -> dict[str, list[int]]:
        """Each phrase to avoid, as written and with its first letter upper-cased, with its token ids (if any)."""
        forms = dict.fromkeys(form for text in self.avoid for form in (text, text[:1].upper() + text[1:]))
        return {form: ids for form in forms if (ids := self.ids(form))}

    def avoided_ids(self) -> list[list[int]]:
        """The token ids of each phrase to avoid, as written and with its first letter upper-cased."""
        return list(self.avoided_forms().values())

    def constraints(
        self, texts: Sequence[str], indices: Sequence[int], vocab_size: int, device: torch.device
    ) -> Constraints:
        """The constraints of the sources `indices` of `texts` (one batch)."""
        from .constraints import Constraints, word_continuations

        required = [[self.ids(term.target) for term in self.terms(texts[i]) if self.writable(term.target)]
                    for i in indices]  # fmt: skip
        prefixes = [self.prefix_ids(i) for i in indices]
        avoided = self.avoided_ids()
        if any(required) and vocab_size not in self._continues_word:
            self._continues_word[vocab_size] = word_continuations(self.tokenizer, vocab_size)
        continues_word = self._continues_word.get(vocab_size) if any(required) else None
        return Constraints.build(required, [avoided] * len(indices), prefixes, continues_word, device)

    def prefix_ids(self, index: int) -> list[int]:
        """The token ids of the prefix of text `index` (none: no prefix); warns once for a prefix with letters the
        model cannot write (its translations start without them)."""
        prefix = self.prefixes[index] if self.prefixes else ""
        ids = self.ids(prefix) if prefix else []
        if self.tokenizer.unk_token_id in ids and prefix not in self._unwritable:
            self._unwritable.add(prefix)
            logger.warning("the prefix %r has letters the model cannot write: translations start without them", prefix)
        return ids

    def needed_tokens(self, text: str, index: int) -> int:
        """The fewest tokens a translation of `text` (text `index`) needs for its prefix and its terms."""
        return len(self.prefix_ids(index)) + sum(len(self.ids(term.target)) for term in self.terms(text))

    def tokens(self, ids: list[int]) -> list[str]:
        """Token strings of `ids` (CTranslate2 takes tokens)."""
        return self.tokenizer.convert_ids_to_tokens(ids)


__all__ = ["LexicalOptions"]
