"""Secrets (Hub tokens, passwords) kept out of everything a run records, logs or prints: the value of every option
or config key whose name says it is a secret (`--hub_token`, `hub_token:`, `*password*`, `*secret*`), and anything
that looks like a Hub token where a secret can stand: not within a path or repo id, nor as the value of an option that
names a place (`--output_dir`, `--hub_model_id`, `model_name_or_path:`). Standard library only: the command line uses
it before torch is imported."""

from __future__ import annotations

import re
from collections.abc import Sequence

REDACTED = "<redacted>"
SECRET_WORDS = ("token", "password", "passwd", "secret")
PLACE_WORDS = ("dir", "path", "id", "data", "model", "output", "file", "compare", "document", "config")
_HF_TOKEN = re.compile(r"(?<![\w/.-])hf_[A-Za-z0-9]{20,}(?![\w/.-])")  # a Hub token, not part of a path or id
_URL_PASSWORD = re.compile(r"(?P<user>[a-z][a-z0-9+.-]*://[^\s:/@]*):[^\s/@]+@", re.IGNORECASE)  # scheme://user:pw@
# `name: value` / `"name": "value"` (YAML, JSON) and `--name=value`; the value quoted, or up to the line's end
# (a YAML comment, a comma or a closing bracket ends it)
_KEY_VALUE = re.compile(
    r"""(?P<key>(?P<quote>["']?)(?P<name>[A-Za-z_][\w.-]*)(?P=quote)[ \t]*[:=][ \t]*)"""
    r"""(?P<value>"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s,}\]#](?:[^\n,}\]#]*[^\s,}\]#])?)"""
)
# `--name VALUE` / `--name=VALUE` in a message
_OPTION_VALUE = re.compile(r"(?P<key>(?<![\w-])--?(?P<name>[A-Za-z][\w.-]*)(?:\s+|=))(?P<value>[^\s-][^\s,'\"\]]*)")


def is_secret_option(name: str) -> bool:
    """Whether an option or config key carries a secret: a word of its name ends with token, password or secret
    (`--hub_token`, `hub-token`, `db_password`, `client_secret`; not `max_new_tokens` or `tokenizer_type`)."""
    return any(word.endswith(SECRET_WORDS) for word in re.split(r"[_.-]+", name.lstrip("-").lower()))


def is_place_option(name: str) -> bool:
    """Whether an option or config key names a place (a folder, file, corpus, model or repo id), whose value is
    kept as it is (`--output_dir`, `--hub_model_id`, `model_name_or_path`), unless it is a secret option."""
    words = re.split(r"[_.-]+", name.lstrip("-").lower())
    return words[-1] in PLACE_WORDS and not is_secret_option(name)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """`argv` with the value of every secret option (`--hub_token VALUE`, `--hub_token=VALUE`) and every Hub token
    replaced by `<redacted>`."""
    redacted: list[str] = []
    before = ""  # the option before, when it took no `=VALUE`
    for arg in argv:
        name, equals, _ = arg.partition("=")
        is_option = arg.startswith("-")
        if before and not is_option and is_secret_option(before):
            redacted.append(REDACTED)
        elif is_option and equals and is_secret_option(name):
            redacted.append(f"{name}={REDACTED}")
        elif (before and not is_option and is_place_option(before)) or (is_option and is_place_option(name)):
            redacted.append(arg)
        else:
            redacted.append(_HF_TOKEN.sub(REDACTED, arg))
        before = arg if is_option and not equals else ""
    return redacted


def _hide_secret_value(match: re.Match[str]) -> str:
    """A match of `_KEY_VALUE` or `_OPTION_VALUE` (or a lone token) with its secret hidden: the whole value of a
    secret key, a token in the value of any key but a place's."""
    if match["token"]:
        return REDACTED
    if is_place_option(match["name"]):
        return match[0]
    if not is_secret_option(match["name"]):
        return f"{match['key']}{_HF_TOKEN.sub(REDACTED, match['value'])}"
    value = match["value"]
    quote = value[0] if value[0] in "\"'" else ""
    return f"{match['key']}{quote}{REDACTED}{quote}"


# One pass over a text: each key (option) with its value, or a token outside any
_CONFIG_PARTS = re.compile(f"{_KEY_VALUE.pattern}|(?P<token>{_HF_TOKEN.pattern})")
_MESSAGE_PARTS = re.compile(f"{_OPTION_VALUE.pattern}|(?P<token>{_HF_TOKEN.pattern})")


# A YAML key whose value starts on the next lines: `name:` alone, or a block scalar `name: |` / `name: >-`
_KEY_OPENS_BLOCK = re.compile(r"""^(?P<indent>[ \t]*)(?P<quote>["']?)(?P<name>[A-Za-z_][\w.-]*)(?P=quote)[ \t]*:"""
                              r"""[ \t]*(?:[|>][-+0-9]*)?[ \t]*(?:#.*)?$""")  # fmt: skip


def _hide_secret_blocks(text: str) -> str:
    """`text` with the more indented lines under a secret YAML key with no value on its own line replaced."""
    lines, block_indent = text.splitlines(keepends=True), None
    for number, line in enumerate(lines):
        indent = len(line) - len(line.lstrip(" \t"))
        if block_indent is not None and (not line.strip() or indent > block_indent):
            if line.strip():
                lines[number] = f"{line[:indent]}{REDACTED}\n"
            continue
        block_indent = None
        opening = _KEY_OPENS_BLOCK.match(line.rstrip("\r\n"))
        if opening and is_secret_option(opening["name"]):
            block_indent = len(opening["indent"])
    return "".join(lines)


def redact_config(text: str) -> str:
    """A YAML or JSON options text with the value of every secret key (`hub_token: VALUE`, `"hub_token": "VALUE"`,
    also on the lines below `hub_token:` or `hub_token: |`) and every Hub token replaced by `<redacted>` (quotes and
    comments kept)."""
    return _CONFIG_PARTS.sub(_hide_secret_value, _hide_secret_blocks(text))


def redact_message(text: str) -> str:
    """A message (an error, a command line as text) with the value of every secret option (`--hub_token VALUE`,
    `--hub_token=VALUE`), every Hub token and the password of every URL replaced by `<redacted>`; the rest as it
    is."""
    return _URL_PASSWORD.sub(rf"\g<user>:{REDACTED}@", _MESSAGE_PARTS.sub(_hide_secret_value, text))


__all__ = ["REDACTED", "is_place_option", "is_secret_option", "redact_argv", "redact_config", "redact_message"]
