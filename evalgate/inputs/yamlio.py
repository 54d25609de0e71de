"""The one strict YAML reader of evalgate's input files: engine configs, ``thresholds.yaml`` and suite YAMLs.

On top of ``yaml.SafeLoader`` (no Python tags) it refuses what PyYAML accepts silently:

- a key given twice in one mapping (PyYAML keeps the last: ``engine_args`` written twice would drop the first block,
  two ``task:`` lines would gate the second task while the file reads as the first), named by file, line and
  dotted field;
- aliases that expand to more than :data:`MAX_NODES` values (a "billion laughs" file);
- values nested more than :data:`MAX_DEPTH` deep (``[[[[...]]]]``: PyYAML's composer recurses once per level);
- bytes that are not UTF-8 (a UTF-8 byte-order mark is accepted), an empty file, a top level that is not a mapping.

lm-eval's ``!function module.name`` tag reads as the plain string (suite YAMLs use it). Each kind of file keeps the
wording its users and the bad-input corpus know (:class:`Wording`); the checks are the same for all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evalgate.errors import ConfigError
from evalgate.inputs.schema import show

MAX_NODES = 100_000  # YAML values in one file, aliases expanded (a config has a few dozen, a suite YAML hundreds)
MAX_DEPTH = 64  # nesting levels of one value (evalgate's files use fewer than 10)
_MERGE_TAG = "tag:yaml.org,2002:merge"


class Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that reads lm-eval's ``!function module.name`` as the plain string."""


Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


@dataclass(frozen=True)
class Wording:
    """How one kind of file words its YAML problems. Fields are ``str.format`` templates.

    Attributes:
        what: the kind of file, for "is a directory, not a <what> file".
        syntax: a YAML error: ``{at}`` (from ``at``, empty without a position) and ``{problem}``.
        at: the position inside ``syntax``: ``{line}``, ``{column}`` (1-based).
        not_utf8: ``{byte}`` (int), ``{line}``, ``{offset}``.
        duplicate: a repeated key: ``{key}``, ``{line}``, ``{column}``.
        empty: the file holds no document (comments only).
    """

    what: str
    syntax: str = "invalid YAML{at}: {problem}"
    at: str = " at line {line}, column {column}"
    not_utf8: str = "not valid UTF-8: byte 0x{byte:02x} at line {line}"
    duplicate: str = "duplicate key {key!r} (line {line}); PyYAML would silently keep the last one: give each key once"
    empty: str = "file is empty"


def read_mapping(path: Path, wording: Wording, functions: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """Read ``path`` strictly (see the module docstring) and return its top-level mapping. ``functions``, when
    given, receives ``(dotted field, "module.name")`` for each ``!function`` tag of the file.

    Raises:
        ConfigError: naming ``path`` (and the dotted field of a duplicate key or an alias bomb): missing file,
            directory, unreadable, not UTF-8, YAML syntax error (line, column), duplicate key, too many values,
            empty, top level not a mapping.
    """
    data = parse(_text(path, wording), path, wording, functions)
    if data is None:
        raise ConfigError(wording.empty, path=path)
    if not isinstance(data, dict):
        raise ConfigError(f"top level must be a mapping, got {show(data)}", path=path)
    return data


def _text(path: Path, wording: Wording) -> str:
    if path.is_dir():
        raise ConfigError(f"is a directory, not a {wording.what} file", path=path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("file not found", path=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror or exc}", path=path) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(wording.not_utf8.format(byte=data[exc.start], line=line, offset=exc.start),
                          path=path) from None


def parse(text: str, path: Path, wording: Wording, functions: list[tuple[str, str]] | None = None) -> Any:
    """One YAML document of ``text`` (None when empty), duplicate keys, alias bombs and values nested more than
    ``MAX_DEPTH`` deep refused (ConfigError); ``functions`` (when given) receives each ``!function`` tag's
    ``(dotted field, value)``."""
    loader = None
    try:
        loader = Loader(text)  # a control character is refused here already
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, path, wording, functions)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = wording.at.format(line=mark.line + 1, column=mark.column + 1) if mark else ""
        message = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise ConfigError(wording.syntax.format(at=at, problem=message), path=path) from None
    except RecursionError:  # nested deeper than the composer's recursion can go: before _check_nodes could see it
        raise ConfigError(f"values nested too deeply (more than {MAX_DEPTH} levels)", path=path) from None
    finally:
        if loader is not None:
            loader.dispose()


def _check_nodes(root: yaml.Node, path: Path, wording: Wording,
                 functions: list[tuple[str, str]] | None = None) -> None:
    """Walk the node tree in document order as it will be constructed (aliases expanded): a key given twice in
    one mapping, more than ``MAX_NODES`` values, or an alias inside the value it names (``&a [*a]``: a value that
    contains itself, endless once expanded), or a value nested more than ``MAX_DEPTH`` levels deep is a ConfigError
    naming the dotted field."""
    stack: list[tuple[yaml.Node, str, bool, int]] = [(root, "", False, 0)]
    open_nodes: set[int] = set()  # the nodes on the path from the root to the current one
    visited = 0
    while stack:
        node, where, leaving, depth = stack.pop()
        if leaving:
            open_nodes.discard(id(node))
            continue
        if id(node) in open_nodes:
            raise ConfigError("recursive YAML alias: the value contains itself", path=path, field=where or None)
        if depth > MAX_DEPTH:
            raise ConfigError(f"values nested too deeply (more than {MAX_DEPTH} levels)", path=path,
                              field=where or None)
        visited += 1
        if visited > MAX_NODES:
            raise ConfigError(f"too large: more than {MAX_NODES} values once YAML aliases are expanded", path=path,
                              field=where or None)
        if isinstance(node, yaml.SequenceNode):
            children = [(child, f"{where}[{i}]") for i, child in enumerate(node.value)]
        elif isinstance(node, yaml.MappingNode):
            children = _mapping_children(node, where, path, wording)
        else:
            if functions is not None and node.tag == "!function":
                functions.append((where, str(node.value)))
            continue
        open_nodes.add(id(node))
        stack.append((node, where, True, depth))
        stack += reversed([(child, at, False, depth + 1) for child, at in children])


def _mapping_children(node: yaml.MappingNode, where: str, path: Path, wording: Wording) -> list[tuple[yaml.Node, str]]:
    seen: set[tuple[str, str]] = set()
    children: list[tuple[yaml.Node, str]] = []
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
            children.append((value_node, where))
            continue
        dotted = f"{where}.{key_node.value}" if where else str(key_node.value)
        if (key_node.tag, key_node.value) in seen:
            mark = key_node.start_mark
            raise ConfigError(wording.duplicate.format(key=key_node.value, line=mark.line + 1, column=mark.column + 1),
                              path=path, field=dotted)
        seen.add((key_node.tag, key_node.value))
        children.append((value_node, dotted))
    return children
