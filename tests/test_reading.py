"""Reading JSON (``dspark.reading``): one reader for every file, its bounds where they say."""

from __future__ import annotations

import pytest

from dspark.errors import DsparkError


def test_the_json_bounds_are_where_they_say(tmp_path):
    """One reader for every JSON file: 64 levels of nesting read, 65 refused; a number of 100
    characters read, 101 refused; NaN read only where asked for; a key twice refused."""
    from dspark.reading import MAX_JSON_DEPTH, MAX_NUMBER_CHARS, parse_json, read_json

    assert parse_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "f") is not None
    with pytest.raises(DsparkError, match="nested deeper than 64"):
        parse_json("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "f")
    assert parse_json('{"s": "' + "[" * 1000 + '"}', "f")  # brackets inside a string are text
    assert parse_json("1" * MAX_NUMBER_CHARS, "f") == int("1" * MAX_NUMBER_CHARS)
    with pytest.raises(DsparkError, match="longer than 100"):
        parse_json("[" + "1" * (MAX_NUMBER_CHARS + 1) + "]", "f")
    assert parse_json('{"s": "' + "7" * 10_000 + '"}', "f")  # digits inside a string are text
    assert str(parse_json("[NaN]", "f")) == "[nan]"
    for text in ("[NaN]", "[1e999]", "[-Infinity]"):
        with pytest.raises(DsparkError, match="which is not a number"):
            parse_json(text, "f", allow_nan=False)
    with pytest.raises(DsparkError, match="gives the key 'a' twice"):
        parse_json('{"b": {"a": 1, "a": 2}}', "f")
    (tmp_path / "big.json").write_text("[" + "0," * 600 + "0]")
    with pytest.raises(DsparkError, match="larger than a config can be"):
        read_json(tmp_path / "big.json", 1000, "config")
