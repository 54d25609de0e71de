"""The documentation site's reference pages: the CLI page and the key tables of config files and ``thresholds.yaml``
are generated from the parser and the pydantic models (``docs/hooks.py``) and hold every option and key with its
default and meaning; the models' defaults are what a minimal file gets; links from the README and the docs to files
and dated results point at something real; and (where mkdocs is installed) the site builds with ``--strict``."""

from __future__ import annotations

import argparse
import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evalgate.cli import build_parser
from evalgate.errors import ConfigError
from evalgate.inputs.chat import Chat
from evalgate.inputs.config import ConfigLayer, Sampling, config_key_rows, load_config
from evalgate.inputs.schema import key_rows, markdown_table
from evalgate.inputs.thresholds import LevelOverride, ThresholdsFile, load_thresholds

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def _hooks():
    """``docs/hooks.py``, loaded by path as mkdocs loads it."""
    spec = importlib.util.spec_from_file_location("evalgate_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


HOOKS = _hooks()


def _page(name: str) -> str:
    """A docs page as the site renders it: its generated tables expanded."""
    return HOOKS.expand((DOCS / name).read_text(encoding="utf-8"), name)


def _table_after(text: str, header: str) -> list[list[str]]:
    """The cells of every row of the Markdown table whose header row starts with ``header`` (unescaped)."""
    lines = text[text.index(header):].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [html.unescape(c.strip().replace("&#124;", "|")) for c in line.strip().strip("|").split(" | ")]
        rows.append(cells)
    return rows


def _key_table(page: str) -> list[tuple[str, str, str]]:
    """``(key, default, meaning)`` rows of the key table of ``page`` (``reference/config.md``, ...)."""
    rows = []
    for cells in _table_after(_page(page), "| key | default | meaning |"):
        assert len(cells) == 3, cells
        key, default, meaning = cells
        rows.append((key.strip("`"), default.strip("`"), meaning))
    return rows


# ------------------------------------------------------------------------------------------ key tables


@pytest.mark.parametrize(("page", "rows"), [("reference/thresholds.md", key_rows(ThresholdsFile)),
                                            ("reference/config.md", config_key_rows())],
                         ids=["thresholds", "config"])
def test_key_page_is_the_models_keys_defaults_and_meanings(page: str, rows: list[tuple[str, str, str]]) -> None:
    documented = _key_table(page)
    want = {k: (d, m) for k, d, m in rows}
    got = {k: (d, m) for k, d, m in documented}
    assert sorted(set(got) - set(want)) == [], "the page documents keys the model does not have"
    assert sorted(set(want) - set(got)) == [], "keys of the model missing from the page"
    wrong = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    assert not wrong, f"page rows differ from the model (page, model): {wrong}"
    assert [k for k, _, _ in documented] == [k for k, _, _ in rows], "rows out of the model's order"
    assert markdown_table(rows) in _page(page)


def _walk(model: type, prefix: str = "", seen: set[type] | None = None) -> list[str]:
    """Every key of ``model`` as a dotted path, found from ``model_fields`` and the annotations (not through
    ``key_rows``): a nested section's keys under its name, a mapping of entries as ``name.<entry>``; a model met a
    second time is one key (the page says "Same keys as ...")."""
    import collections.abc
    import typing

    from evalgate.inputs.schema import Schema

    def models(annotation: object) -> list[type]:
        if isinstance(annotation, type) and issubclass(annotation, Schema):
            return [annotation]
        return [m for a in typing.get_args(annotation) for m in models(a)]

    seen = set() if seen is None else seen
    seen.add(model)
    keys = []
    for name, info in model.model_fields.items():
        name = info.alias or name  # the key a file writes (traffic.from is field from_)
        annotation = info.annotation
        if typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        is_map = typing.get_origin(annotation) in (dict, collections.abc.Mapping)
        nested = models(typing.get_args(annotation)[1] if is_map else annotation)
        key = f"{prefix}{name}.<{name.removesuffix('s')}>" if is_map and nested else f"{prefix}{name}"
        keys.append(key)
        if nested and nested[0] not in seen:
            keys += _walk(nested[0], key + ".", seen)
    return keys


@pytest.mark.parametrize(("page", "keys", "some"), [
    ("reference/thresholds.md", _walk(ThresholdsFile),
     {"alpha", "default.margin", "lossless.max_kl_mean", "traffic.mode", "traffic.from", "suites.<suite>.margin",
      "configs.<config>.min_speedup", "configs.<config>.traffic"}),
    ("reference/config.md", _walk(ConfigLayer) + _walk(Sampling, "sampling.") + _walk(Chat, "chat."),
     {"model", "extends", "engine_args", "sampling.max_tokens", "sampling.seed", "chat.template", "chat.think_end"}),
], ids=["thresholds", "config"])
def test_every_key_of_the_models_is_a_row_of_its_page(page: str, keys: list[str], some: set[str]) -> None:
    assert some <= set(keys)
    assert [k for k, _, _ in _key_table(page)] == keys


def test_every_key_of_every_model_has_a_meaning() -> None:
    for model in (ThresholdsFile, LevelOverride, ConfigLayer, Sampling, Chat):
        for name, info in model.model_fields.items():
            assert info.description and len(info.description) > 10, f"{model.__name__}.{name} has no docstring"


def test_key_rows_expands_nested_sections_and_entry_mappings() -> None:
    keys = [k for k, _, _ in key_rows(ThresholdsFile)]
    assert {"default.margin", "lossless.max_kl_mean", "traffic.concurrency", "suites.<suite>.margin",
            "configs.<config>.min_speedup", "configs.<config>.suites.<suite>"} <= set(keys)
    assert "configs.<config>.suites.<suite>.margin" not in keys  # one row pointing at suites.<suite>
    defaults = {k: d for k, d, _ in key_rows(ThresholdsFile)}
    assert (defaults["alpha"], defaults["default.margin"], defaults["power"], defaults["lossless.near_tie_logprob"],
            defaults["spec_decode.min_acceptance_rate"]) == ("required", "required", "0.8", "0.01", "-")


def test_a_minimal_file_gets_the_documented_defaults(tmp_path: Path) -> None:
    """The defaults the pages show are the ones loading applies (read back from the pages, not from the model)."""
    documented = {k: d for k, d, _ in _key_table("reference/thresholds.md")}
    path = tmp_path / "t.yaml"
    path.write_text("alpha: 0.05\ndefault: {margin: 2.0}\n", encoding="utf-8")
    t = load_thresholds(path)
    assert t.power == float(documented["power"]) == 0.8
    assert t.on_inconclusive == documented["on_inconclusive"] == "block"
    assert t.bootstrap_resamples == int(documented["bootstrap_resamples"]) == 10_000
    assert t.seed == int(documented["seed"]) == 0
    assert t.min_identical_share == float(documented["lossless.min_identical_share"]) == 0.95
    assert t.near_tie_logprob == float(documented["lossless.near_tie_logprob"]) == 0.01
    assert t.max_kl_mean == float(documented["lossless.max_kl_mean"]) == 0.001
    assert not t.spec_decode.any and t.traffic is None and t.speed.min_speedup is None
    cfg_doc = {k: d for k, d, _ in _key_table("reference/config.md")}
    (tmp_path / "c.yaml").write_text("model: m\n", encoding="utf-8")
    c = load_config("c", tmp_path, check_engine_args=False)
    assert (c.sampling.temperature, c.sampling.top_p, c.sampling.max_tokens, c.sampling.seed) == (
        float(cfg_doc["sampling.temperature"]), float(cfg_doc["sampling.top_p"]), int(cfg_doc["sampling.max_tokens"]),
        int(cfg_doc["sampling.seed"])) == (0.0, 1.0, 256, 0)
    assert c.expect == cfg_doc["expect"] == "lossy" and c.description == "" and c.baseline is None


@pytest.mark.parametrize(("text", "field", "fragment"), [
    ("version: 2\nalpha: 0.05\ndefault: {margin: 2.0}\n", "version", "must be 1 (the only thresholds schema version)"),
    ("version: 1\nalpha: 0.05\ndefault: {margin: 2.0}\n", None, None),
])
def test_thresholds_schema_version(tmp_path: Path, text: str, field: str | None, fragment: str | None) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(text, encoding="utf-8")
    if fragment is None:
        assert load_thresholds(path).alpha == 0.05
        return
    with pytest.raises(ConfigError) as err:
        load_thresholds(path)
    assert err.value.field == field and fragment in str(err.value) and err.value.exit_code == 2
    assert re.fullmatch(rf"{re.escape(str(path))}: version: .*got 2", str(err.value))


def test_config_schema_version(tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text("version: 1\nmodel: m\n", encoding="utf-8")
    assert load_config("ok", tmp_path, check_engine_args=False).model == "m"
    (tmp_path / "new.yaml").write_text("version: 3\nmodel: m\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config("new", tmp_path, check_engine_args=False)
    assert err.value.field == "version" and "must be 1 (the only config schema version), got 3" in str(err.value)


# ------------------------------------------------------------------------------------------ the CLI page


def _commands(parser: argparse.ArgumentParser, name: str = "evalgate") -> dict[str, argparse.ArgumentParser]:
    """Every command of the parser by its full name, read from argparse's own structures."""
    found = {name: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                found |= _commands(sub, f"{name} {sub_name}")
    return found


def _cli_sections() -> dict[str, str]:
    """The CLI page's sections by command (``## `evalgate run` `` -> its text)."""
    parts = re.split(r"^## `(evalgate[^`]*)`$", _page("reference/cli.md"), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def test_cli_page_has_every_command_and_option_with_its_default_and_help() -> None:
    sections = _cli_sections()
    commands = _commands(build_parser())
    assert set(sections) == set(commands), "commands of the parser and sections of the page differ"
    assert {"evalgate run", "evalgate ablate", "evalgate model prepare", "evalgate plan", "evalgate compare",
            "evalgate report", "evalgate list", "evalgate changed-configs"} <= set(commands)
    for name, parser in commands.items():
        rows = _table_after(sections[name], "| argument | default | meaning |") if "| argument |" in sections[name] \
            else []
        by_option = {cells[0].strip("`"): cells for cells in rows}
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            spelled = [k for k in by_option if (action.option_strings and k.split(" ")[0] in action.option_strings)
                       or (not action.option_strings and k == (action.metavar or action.dest))]
            assert len(spelled) == 1, f"{name}: {action.option_strings or action.dest} not one row of the page"
            _, default, meaning = by_option[spelled[0]]
            assert meaning == " ".join((action.help or "").split()), (name, spelled[0])
            if action.required:
                assert default == "required", (name, spelled[0])
            elif action.default not in (None, False) and action.nargs != 0:
                shown = ",".join(map(str, action.default)) if isinstance(action.default, list) else str(action.default)
                assert default == f"`{shown}`", (name, spelled[0])
            else:
                assert default == "-", (name, spelled[0])
    assert "--assume-discordance P" in sections["evalgate plan"] and "{all,alone,cumulative}" in sections["evalgate ablate"]


def _usage_block(text: str, after: str) -> str:
    """The first fenced block after the line ``after`` (the hand-written command summary)."""
    rest = text[text.index(after):]
    start = rest.index("```\n") + 4
    return rest[start:rest.index("```", start)]


def test_command_summaries_of_the_readme_and_the_cli_page_list_every_option() -> None:
    """The hand-written summary (README's "Commands", the CLI page's top) names every option of every command of the
    parser, as ``evalgate <command> --help`` lists them, and reads the same in both places."""
    readme = _usage_block(README.read_text(encoding="utf-8"), "## Commands")
    page = _usage_block((DOCS / "reference" / "cli.md").read_text(encoding="utf-8"), "# Command line")
    assert readme == page
    commands = _commands(build_parser())
    by_command: dict[str, str] = {}
    current = None
    for line in page.splitlines():
        if line.startswith("evalgate"):
            words = line.split()
            current = max((c for c in commands if words[:len(c.split())] == c.split()), key=len)
        assert current is not None, line
        by_command[current] = by_command.get(current, "") + " " + line.split("#")[0]
    missing = []
    for name, parser in commands.items():
        if parser._subparsers is not None and name != "evalgate":
            continue  # "evalgate model": its subcommand's line names it
        text = by_command.get(name, "")
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            spelled = [o for o in action.option_strings if o.startswith("--")] or [action.metavar or action.dest]
            if not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text) for o in spelled):
                missing.append(f"{name}: {spelled[0]}")
    assert missing == []


def test_an_unknown_generated_marker_names_the_page() -> None:
    with pytest.raises(ValueError, match=r"guide\.md: <!-- generated: cli-keys -->: no such generated table"):
        HOOKS.expand("text\n<!-- generated: cli-keys -->\n", "guide.md")
    assert HOOKS.expand("plain text, no marker\n") == "plain text, no marker\n"


# ------------------------------------------------------------------------------------------ links and the build


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def test_relative_links_from_the_readme_and_docs_point_at_files() -> None:
    """Every relative Markdown link of the README and the docs names a file that exists where the Markdown lies (as
    GitHub resolves it): the README's into docs/, a page's to another page or to a file under benchmarks/results/
    by its real place (never the site-only ``../results/``; the site rewrites those links, ``hooks.site_links``)."""
    broken = []
    for md in _markdown_files():
        for target in re.findall(r"\]\(([^)\s]+)\)", md.read_text(encoding="utf-8")):
            path = target.split("#")[0]
            if not path or "://" in path:
                continue
            if not (md.parent / path).exists():
                broken.append(f"{md.relative_to(ROOT)}: {target}")
    assert broken == []


def test_links_to_dated_results_point_at_the_sites_copies() -> None:
    page = "see [the run](../../benchmarks/results/cpu-mainjob-s5/README.md) and [x](../guides/ci.md)"
    assert HOOKS.site_links(page, "measurements/index.md") == (
        "see [the run](../results/cpu-mainjob-s5/README.md) and [x](../guides/ci.md)")
    assert HOOKS.site_links("[r](../benchmarks/results/a.json)", "tutorial.md") == "[r](results/a.json)"
    assert (ROOT / "benchmarks/results/cpu-mainjob-s5/README.md").is_file()


def test_code_paths_named_in_the_docs_exist() -> None:
    """Every ``benchmarks/...``, ``tests/...``, ``docs/examples/...`` or ``suites/...`` path the README and the
    docs name in backticks exists (dated results are cited by path; a moved file must not leave a dangling one)."""
    missing = []
    for md in _markdown_files():
        for path in re.findall(r"`((?:benchmarks|tests|docs/examples|scripts)/[^`\s*<]+)`", md.read_text("utf-8")):
            if not (ROOT / path.rstrip(":,")).exists():
                missing.append(f"{md.relative_to(ROOT)}: {path}")
    assert missing == []


def test_readme_is_short_and_keeps_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert "./scripts/install.sh && .venv/bin/evalgate run --config fp16-state" in text
    assert "./scripts/install.sh && .venv/bin/python -m pytest -q -ra" in text
    assert [c for c in ("0", "1", "2", "3", "4", "5", "130", "141") if f"\n| {c} |" not in text] == []


def test_the_site_builds_strict(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (as .ci/run runs it): every page renders, every link and snippet resolves, and the
    generated pages carry the parser's options and the models' keys."""
    pytest.importorskip("mkdocs", reason="needs the docs extra (pip install -e '.[docs]')")
    pytest.importorskip("material", reason="needs the docs extra (pip install -e '.[docs]')")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "--assume-discordance" in cli and "runs/&lt;config&gt;-&lt;UTC time&gt;" in cli
    keys = (site / "reference" / "thresholds" / "index.html").read_text(encoding="utf-8")
    assert "lossless.near_tie_logprob" in keys and "configs.&lt;config&gt;.min_speedup" in keys
    assert (site / "results" / "cpu-mainjob-s5" / "index.html").is_file()  # benchmarks/results mounted
    byod = html.unescape(re.sub(r"<[^>]+>", "", (site / "guides" / "bring-your-own-data" / "index.html").read_text(
        encoding="utf-8")))  # the page's text, syntax-highlighting spans removed
    scorer = (ROOT / "docs/examples/byod/suites/contracts/scorer.py").read_text(encoding="utf-8")
    assert "def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, float]:" in scorer
    assert "def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, float]:" in byod  # the snippet
    assert "--8<--" not in byod
