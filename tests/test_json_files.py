"""hf_bahdanau/json_files.py: JSON read with one-line errors that name the file and the place."""

import pytest

from hf_bahdanau.errors import InputError
from hf_bahdanau.json_files import parse_json, read_json


def test_parse_json_names_the_place_of_the_problem():
    assert parse_json('{"a": [1, 2]}', "x") == {"a": [1, 2]}
    with pytest.raises(InputError, match=r"^here: invalid JSON \(Expecting ',' delimiter at column 9\)$"):
        parse_json('{"a": 1 "b": 2}', "here")
    with pytest.raises(InputError, match=r"^here: invalid JSON \(Expecting ',' delimiter at line 2, column 2\)$"):
        parse_json('{"a": 1\n "b": 2}', "here")
    with pytest.raises(InputError, match=r"^here: JSON nested too deeply to read$"):
        parse_json("[" * 100_000, "here")


def test_read_json_gives_an_object_or_names_the_file(tmp_path):
    path = tmp_path / "record.json"
    assert read_json(path) == {}  # no file
    path.write_text('{"steps": 3}', encoding="utf-8")
    assert read_json(path) == {"steps": 3}
    for text, problem in (("[1]", "does not hold a JSON object"), ("{", "invalid JSON"), (b"\xff{}", "not UTF-8")):
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(InputError, match=rf"^{path}.*{problem}.*: fix or remove it$"):
            read_json(path)
