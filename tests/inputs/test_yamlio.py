"""evalgate.inputs.yamlio: the one strict YAML reader of configs, thresholds and suite YAMLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalgate.errors import ConfigError, ExitCode
from evalgate.inputs.config import WORDING as CONFIG
from evalgate.inputs.thresholds import WORDING as THRESHOLDS
from evalgate.inputs.yamlio import MAX_DEPTH, MAX_NODES, Wording, parse, read_mapping
from evalgate.suites.files import WORDING as SUITE

PLAIN = Wording("test")


def _file(tmp_path: Path, data: str | bytes) -> Path:
    path = tmp_path / "f.yaml"
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def _error(path: Path, wording: Wording = PLAIN) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        read_mapping(path, wording)
    assert info.value.exit_code == ExitCode.USAGE and "\n" not in str(info.value)
    assert info.value.path == path
    return info.value


def test_reads_a_mapping_with_function_tags_merge_keys_and_a_bom(tmp_path: Path) -> None:
    text = "\ufeffbase: &b {x: 1}\nother:\n  <<: *b\n  y: !function utils.load\n"
    assert read_mapping(_file(tmp_path, text), PLAIN) == {"base": {"x": 1}, "other": {"x": 1, "y": "utils.load"}}


@pytest.mark.parametrize(("text", "field", "key", "line"), [
    ("a: 1\nb: 2\na: 3\n", "a", "a", 3),
    ("a:\n  b: 1\n  c: 2\n  b: 3\n", "a.b", "b", 4),
    ("a:\n  - {x: 1}\n  - {x: 1, y: 2, x: 3}\n", "a[1].x", "x", 3),
])
def test_a_duplicate_key_names_the_dotted_field_and_line(tmp_path: Path, text: str, field: str, key: str,
                                                         line: int) -> None:
    err = _error(_file(tmp_path, text))
    assert err.field == field
    assert f"duplicate key '{key}' (line {line}); PyYAML would silently keep the last one" in str(err)


def test_the_same_key_in_two_mappings_is_not_a_duplicate(tmp_path: Path) -> None:
    assert read_mapping(_file(tmp_path, "a: {k: 1}\nb: {k: 2}\n"), PLAIN) == {"a": {"k": 1}, "b": {"k": 2}}


def test_each_file_kind_keeps_its_wording(tmp_path: Path) -> None:
    path = _file(tmp_path, "a: 1\na: 2\n")
    assert str(_error(path, THRESHOLDS)).endswith("a: invalid YAML at line 2, column 1: duplicate key 'a'")
    assert "duplicate key 'a' (line 2)" in str(_error(path, CONFIG))
    bad = _file(tmp_path, "a: [1\n")
    assert "YAML syntax error: line 2: " in str(_error(bad, CONFIG))
    assert "invalid YAML at line 2, column 1: " in str(_error(bad, THRESHOLDS))
    assert "cannot parse YAML at line 2, column 1: " in str(_error(bad, SUITE))


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 7)]  # 10**7 values
    err = _error(_file(tmp_path, "\n".join(lines) + "\n"))
    assert f"too large: more than {MAX_NODES} values once YAML aliases are expanded" in str(err)
    assert err.field is not None and err.field.startswith("a")


def test_a_small_alias_is_fine(tmp_path: Path) -> None:
    assert read_mapping(_file(tmp_path, "a: &a [1, 2]\nb: *a\n"), PLAIN) == {"a": [1, 2], "b": [1, 2]}


@pytest.mark.parametrize(("data", "fragment"), [
    (b"a: 1\n# caf\xe9\n", "not valid UTF-8: byte 0xe9 at line 2"),
    (b"", "file is empty"),
    (b"# only a comment\n", "file is empty"),
    (b"- 1\n- 2\n", "top level must be a mapping, got a list"),
    (b"just text\n", "top level must be a mapping, got 'just text' (a string)"),
    (b"a: \x00\n", "invalid YAML: unacceptable character #x0000"),
    (b"a: !!python/object/apply:os.getcwd []\n", "invalid YAML at line 1, column 4"),
    (b"a: 1\n---\nb: 2\n", "invalid YAML"),
])
def test_malformed_files_are_one_line_errors(tmp_path: Path, data: bytes, fragment: str) -> None:
    err = _error(_file(tmp_path, data))
    assert fragment in str(err) and err.field is None


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert str(_error(tmp_path / "nope.yaml")) == f"{tmp_path / 'nope.yaml'}: file not found"
    assert str(_error(tmp_path, THRESHOLDS)) == f"{tmp_path}: is a directory, not a thresholds file"


def test_parse_returns_none_for_an_empty_document(tmp_path: Path) -> None:
    assert parse("# nothing\n", tmp_path / "x.yaml", PLAIN) is None
    assert parse("[1, 2]\n", tmp_path / "x.yaml", PLAIN) == [1, 2]


def test_nesting_up_to_max_depth_reads_one_deeper_is_refused_naming_the_field(tmp_path: Path) -> None:
    """The value of ``a`` sits at depth 1; ``[`` * k puts its innermost list at depth k."""
    ok = read_mapping(_file(tmp_path, "a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n"), PLAIN)
    inner = ok["a"]
    for _ in range(MAX_DEPTH - 1):
        (inner,) = inner
    assert inner == []
    err = _error(_file(tmp_path, "a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n"))
    assert err.field == "a" + "[0]" * MAX_DEPTH
    assert f"values nested too deeply (more than {MAX_DEPTH} levels)" in str(err)


def test_nesting_deeper_than_the_composer_can_recurse_is_a_config_error(tmp_path: Path) -> None:
    err = _error(_file(tmp_path, "a: " + "{b: " * 20_000 + "1" + "}" * 20_000 + "\n"))
    assert err.field is None and f"more than {MAX_DEPTH} levels" in str(err)
