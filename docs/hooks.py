"""MkDocs hooks (``hooks:`` in mkdocs.yml): the generated reference tables, and the dated results as site files.

A page's line ``<!-- generated: NAME -->`` is replaced, when the site is built, by the Markdown that :data:`GENERATORS`
makes for NAME from the code itself, so the reference cannot drift from it:

- ``cli``: every command, subcommand and option of ``evalgate.cli.build_parser()`` (usage, default, help text);
- ``config-keys``: every key of a config file, its default and meaning (``evalgate.inputs.config.config_key_rows()``, from
  the pydantic models ``ConfigLayer`` and ``Sampling``);
- ``thresholds-keys``: every key of ``thresholds.yaml`` (``evalgate.inputs.schema.key_rows(ThresholdsFile)``).

The files under ``benchmarks/results/`` (run summaries, session notes, JSON) are added to the site as
``results/...``. A page links such a file by its real place in the repository (``../../benchmarks/results/...`` from
``docs/measurements/``), so the link works where the Markdown is read (GitHub, an editor); the site rewrites it to
the mounted copy (:func:`site_links`), and ``mkdocs build --strict`` checks that every such link resolves. ``tests/system/test_docs_reference.py`` loads this file by path and checks what it generates.
"""

from __future__ import annotations

import argparse
import html
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)
_USAGE_WIDTH = 100  # fixed, so the page does not depend on the terminal that builds it


def _cell(text: str) -> str:
    """Text for one Markdown table cell: one line; ``|``, ``&``, ``<`` and ``>`` escaped (``runs/<config>`` would
    otherwise be read as an HTML tag and vanish)."""
    return html.escape(" ".join(str(text).split()), quote=False).replace("|", "&#124;")


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The action's help as ``--help`` prints it (``%(default)s`` and the like expanded)."""
    return argparse.HelpFormatter(parser.prog)._expand_help(action) if action.help else ""


def _usage(parser: argparse.ArgumentParser) -> str:
    """``parser``'s usage line, wrapped at a fixed width."""
    formatter = argparse.HelpFormatter(parser.prog, width=_USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _option(action: argparse.Action) -> str:
    """``--limit LIMIT``, ``--kind {all,alone,cumulative}``, ``RUN_DIR``: how the option is written."""
    formatter = argparse.HelpFormatter("evalgate")
    if not action.option_strings:
        return f"`{formatter._metavar_formatter(action, action.dest)(1)[0]}`"
    spelled = ", ".join(action.option_strings)
    if action.nargs != 0:
        spelled += " " + formatter._format_args(action, action.dest.upper())
    return f"`{spelled}`"


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
        return "-"
    value = ",".join(map(str, action.default)) if isinstance(action.default, list) else action.default
    return f"`{value}`"


def command_parsers(parser: argparse.ArgumentParser, name: str = "evalgate") -> list[tuple[str, str, Any]]:
    """``(command, one-line help, parser)`` for ``parser`` and every subcommand under it, depth first, in the order
    the parser declares them (``evalgate``, ``evalgate run``, ..., ``evalgate model prepare``, ...)."""
    out: list[tuple[str, str, Any]] = [(name, parser.description or "", parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for sub_name, sub in action.choices.items():
                children = command_parsers(sub, f"{name} {sub_name}")
                out.append((children[0][0], helps.get(sub_name, ""), sub))
                out += children[1:]
    return out


def cli_reference(parser: argparse.ArgumentParser | None = None) -> str:
    """The command-line reference: per command its usage and a table of its arguments (option, default, meaning),
    ``-h/--help`` left out. ``parser`` defaults to ``evalgate.cli.build_parser()``."""
    if parser is None:
        from evalgate.cli import build_parser

        parser = build_parser()
    parts = []
    for command, summary, sub in command_parsers(parser):
        parts.append(f"## `{command}`\n\n{_cell(summary)}\n\n```\n{_usage(sub)}\n```")
        rows = [a for a in sub._actions
                if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
        if rows:
            table = ["| argument | default | meaning |", "|---|---|---|"]
            table += [f"| {_option(a)} | {_default(a)} | {_cell(_help(sub, a))} |" for a in rows]
            parts.append("\n".join(table))
        if sub.epilog:
            parts.append(f"```\n{sub.epilog.strip()}\n```")
    return "\n\n".join(parts)


def config_keys() -> str:
    """The table of every config-file key (``| key | default | meaning |``)."""
    from evalgate.inputs.config import config_key_rows
    from evalgate.inputs.schema import markdown_table

    return markdown_table(config_key_rows())


def thresholds_keys() -> str:
    """The table of every ``thresholds.yaml`` key (``| key | default | meaning |``)."""
    from evalgate.inputs.schema import key_rows, markdown_table
    from evalgate.inputs.thresholds import ThresholdsFile

    return markdown_table(key_rows(ThresholdsFile))


GENERATORS = {"cli": cli_reference, "config-keys": config_keys, "thresholds-keys": thresholds_keys}


def expand(markdown: str, source: str = "<page>") -> str:
    """``markdown`` with each ``<!-- generated: NAME -->`` line replaced by what :data:`GENERATORS` makes for NAME.

    Raises:
        ValueError: a marker names no generator (the message names ``source`` and the marker).
    """
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"{source}: <!-- generated: {name} -->: no such generated table "
                             f"(known: {', '.join(sorted(GENERATORS))})")
        return GENERATORS[name]()

    return MARKER.sub(one, markdown)


# ------------------------------------------------------------------------------------------------ MkDocs events


def site_links(markdown: str, src_uri: str) -> str:
    """``markdown`` of the page at ``src_uri`` (relative to ``docs/``) with each link to a file under
    ``benchmarks/results/``, written relative to the page's place in the repository, pointed at the site's copy
    under ``results/`` (``on_files``): from ``measurements/index.md``, ``](../../benchmarks/results/x.md)`` becomes
    ``](../results/x.md)``."""
    up = "../" * src_uri.count("/")
    return markdown.replace(f"]({up}../{RESULTS.relative_to(ROOT).as_posix()}/", f"]({up}results/")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **_: Any) -> str:
    """MkDocs: expand the generated tables of a page and point its links to dated results at the site's copies
    before it is rendered."""
    return site_links(expand(markdown, page.file.src_uri), page.file.src_uri)


def on_files(files: Any, config: Any, **_: Any) -> Any:
    """MkDocs: add every file under ``benchmarks/results/`` to the site as ``results/<path>``."""
    from mkdocs.structure.files import File

    for path in sorted(p for p in RESULTS.rglob("*") if p.is_file()):
        files.append(File(path.relative_to(RESULTS.parent).as_posix(), src_dir=str(RESULTS.parent),
                          dest_dir=config["site_dir"], use_directory_urls=config["use_directory_urls"]))
    return files
