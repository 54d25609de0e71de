"""How a suite says its items carry images, which suites a command runs by default, and what keys an image suite's
results when its code reuses another suite's files.

A task that sets lm-eval's ``doc_to_image`` is an image task; ``metadata.evalgate.modality`` may say so and must
agree. An image suite runs only when named (``--suites`` or a config's ``suites``); by default every text suite runs.
A suite's ``metadata.evalgate.uses_suites`` puts the used suites' files into its content hash."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from evalgate.commands.pipeline import load_suites
from evalgate.errors import ConfigError
from evalgate.inputs.config import load_config
from evalgate.suites.discovery import SUITES_DIR, list_suites, load_suite
from evalgate.suites.files import content_hash
from evalgate.suites.tasknotes import task_notes

TASK = ("task: {name}\ndataset_path: json\noutput_type: generate_until\ndoc_to_text: '{{{{q}}}}'\n"
        "doc_to_target: '{{{{a}}}}'\nmetric_list:\n  - metric: exact_match\n")


def _suite(root: Path, name: str, extra: str = "") -> Path:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "t.yaml").write_text(TASK.format(name=f"{name}_task") + extra)
    return d


def test_doc_to_image_makes_an_image_task_and_a_declaration_must_agree(tmp_path: Path) -> None:
    _suite(tmp_path, "plain")
    _suite(tmp_path, "inferred", "doc_to_image: [image]\n")
    _suite(tmp_path, "declared", "doc_to_image: [image]\nmetadata:\n  evalgate: {modality: image}\n")
    _suite(tmp_path, "said_text", "metadata:\n  evalgate: {modality: text}\n")
    got = {s.name: (s.modality, [t.modality for t in s.specs]) for s in list_suites(tmp_path)}
    assert got == {"plain": ("text", ["text"]), "inferred": ("image", ["image"]),
                   "declared": ("image", ["image"]), "said_text": ("text", ["text"])}
    assert task_notes(load_suite("declared", tmp_path), "declared_task").baseline_accuracy == {}  # a known key
    for name, extra, fragment in (
            ("video", "metadata:\n  evalgate: {modality: video}\n", "must be 'text' or 'image', got 'video'"),
            ("no_images", "metadata:\n  evalgate: {modality: image}\n", "sets no doc_to_image"),
            ("text_images", "doc_to_image: [page]\nmetadata:\n  evalgate: {modality: text}\n",
             "is 'text', but the task sets doc_to_image")):
        bad = tmp_path / "bad" / name
        _suite(bad.parent, name, extra)
        with pytest.raises(ConfigError) as ei:
            load_suite(name, bad.parent)
        assert ei.value.path == bad / "t.yaml" and ei.value.field == "metadata.evalgate.modality"
        assert fragment in ei.value.message
        shutil.rmtree(bad)


def test_an_image_task_in_a_group_makes_its_suite_an_image_suite(tmp_path: Path) -> None:
    d = _suite(tmp_path, "mixed")
    (d / "p.yaml").write_text(TASK.format(name="pages_task") + "doc_to_image: [image]\n")
    (d / "g.yaml").write_text("group: mixed_group\ntask: [mixed_task, pages_task]\n")
    suite = load_suite("mixed", tmp_path)
    assert [(t.name, t.modality) for t in suite.specs] == [("mixed_task", "text"), ("pages_task", "image")]
    assert suite.modality == "image"


def test_uses_suites_puts_the_used_suites_files_into_the_hash(tmp_path: Path) -> None:
    base = _suite(tmp_path, "base")
    (base / "utils.py").write_text("GOLD = 1\n")
    user = _suite(tmp_path, "user", "metadata:\n  evalgate: {uses_suites: [base]}\n")
    suite = load_suite("user", tmp_path)
    assert suite.uses == ("base",)
    # independently: the folder's own files, then base's under ../base/ (path, NUL, 8-byte size, bytes)
    h = hashlib.sha256()
    for prefix, folder in (("", user), ("../base/", base)):
        for f in sorted(p for p in folder.iterdir() if p.is_file()):
            data = f.read_bytes()
            h.update(f"{prefix}{f.name}".encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    assert suite.content_hash == h.hexdigest() != content_hash(user)
    assert load_suite("base", tmp_path).content_hash == content_hash(base)  # a suite without uses: as before
    (base / "utils.py").write_text("GOLD = 2\n")  # the used suite's scorer changes: the user's results are stale
    assert load_suite("user", tmp_path).content_hash != suite.content_hash
    for value, fragment in (("[nosuch]", "'nosuch' is not another suite"), ("[user]", "'user' is not another"),
                            ("docparse", "must be a list of suite names"), ("['../base']", "is not another suite")):
        (user / "t.yaml").write_text(TASK.format(name="user_task") + f"metadata:\n  evalgate: {{uses_suites: {value}}}\n")
        with pytest.raises(ConfigError) as ei:
            load_suite("user", tmp_path)
        assert ei.value.field == "metadata.evalgate.uses_suites" and fragment in ei.value.message, ei.value


def test_the_shipped_page_tier_is_keyed_by_docparse_too() -> None:
    pages = load_suite("docpages", SUITES_DIR)
    assert pages.content_hash == content_hash(pages.path, [SUITES_DIR / "docparse"]) != content_hash(pages.path)


def test_by_default_every_text_suite_runs_and_image_suites_only_when_named(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "suites"
    _suite(root, "alpha")
    _suite(root, "beta")
    _suite(root, "pics", "doc_to_image: [image]\n")
    with caplog.at_level("INFO", logger="evalgate"):
        assert [s.name for s in load_suites(root, None)] == ["alpha", "beta"]
    assert "suites: pics left out (image suites run when named" in caplog.text
    assert [s.name for s in load_suites(root, ["pics", "alpha"])] == ["pics", "alpha"]
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "base.yaml").write_text("model: org/vl\nsuites: [pics, beta]\n")
    (configs / "cand.yaml").write_text("extends: base\nengine_args: {dtype: bfloat16}\n")
    (configs / "plain.yaml").write_text("model: org/text\n")
    cand = load_config("cand", configs, check_engine_args=False)
    assert cand.suites == ("pics", "beta") and cand.suites_from == configs / "base.yaml"
    assert "suites" not in cand.identity()  # which suites run is not what a result is
    assert [s.name for s in load_suites(root, None, cand)] == ["pics", "beta"]  # the config's choice
    assert [s.name for s in load_suites(root, ["alpha"], cand)] == ["alpha"]  # --suites wins
    assert [s.name for s in load_suites(root, None, load_config("plain", configs, check_engine_args=False))] == [
        "alpha", "beta"]
    (configs / "typo.yaml").write_text("extends: base\nsuites: [pics, betta]\n")
    with pytest.raises(ConfigError) as ei:
        load_suites(root, None, load_config("typo", configs, check_engine_args=False))
    assert (ei.value.path, ei.value.field) == (configs / "typo.yaml", "suites")
    assert "no suite named 'betta'; did you mean 'beta'?" in ei.value.message
    shutil.rmtree(root / "alpha")
    shutil.rmtree(root / "beta")
    with pytest.raises(ConfigError, match=r"no text suite here, only image suites \(pics\)"):
        load_suites(root, None)


def test_the_shipped_defaults_leave_the_page_tier_to_the_vl_configs() -> None:
    text = [s.name for s in list_suites(SUITES_DIR) if s.modality == "text"]
    assert [s.name for s in load_suites(SUITES_DIR, None)] == text and "docpages" not in text
    assert [s.name for s in load_suites(SUITES_DIR, None, load_config("fp16-state"))] == text
    for name in ("vl/baseline", "vl/bf16"):
        assert [s.name for s in load_suites(SUITES_DIR, None, load_config(name, check_engine_args=False))] == [
            "docpages"]


def test_a_configs_suites_is_checked_even_when_the_command_line_names_the_suites(tmp_path: Path) -> None:
    """``--suites`` wins over a config's ``suites``, but a config naming a suite the project lacks is still refused,
    naming the file that set ``suites`` (never silently ignored)."""
    root = tmp_path / "suites"
    _suite(root, "alpha")
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "base.yaml").write_text("model: org/text\n")
    (configs / "typo.yaml").write_text("extends: base\nsuites: [alpha, nosuch]\n")
    typo = load_config("typo", configs, check_engine_args=False)
    for names in (None, ["alpha"]):
        with pytest.raises(ConfigError) as ei:
            load_suites(root, names, typo)
        assert (ei.value.path, ei.value.field) == (configs / "typo.yaml", "suites"), names
        assert "no suite named 'nosuch'" in ei.value.message


def test_the_reported_repro_unknown_config_suite_with_suites_flag_is_exit_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The tester's repro: a config extending the shipped fp16-state by absolute path with ``suites: [nosuch]``, run
    with ``--suites docparse``: exit 2 before any engine, one line naming the config file and ``suites``."""
    import evalgate.evaluate.runner as runner
    from evalgate import cli
    from evalgate.errors import ExitCode
    from evalgate.inputs.config import CONFIGS_DIR

    def trip(*a: object, **k: object) -> None:
        raise AssertionError("an engine or check worker started")

    for name in ("check_engine_values", "start_config", "evaluate_config"):
        monkeypatch.setattr(runner, name, trip)
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    cfg = tmp_path / "nosuch-suites.yaml"
    cfg.write_text(f"extends: {CONFIGS_DIR / 'fp16-state.yaml'}\nsuites: [nosuch]\n")
    code = cli.main(["run", "--config", str(cfg), "--suites", "docparse", "--limit", "2", "--no-speed",
                     "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == ExitCode.USAGE == 2 and len(err) == 1, err
    assert f"{cfg}: suites: no suite named 'nosuch'" in err[0], err


@pytest.mark.parametrize("output_type", ["multiple_choice", "loglikelihood", "loglikelihood_rolling"])
def test_an_image_task_scored_by_log_likelihood_is_refused_at_load(tmp_path: Path, output_type: str) -> None:
    """Images go with generate_until requests only: any other output type is refused when the suite is read (before
    any engine starts), naming the YAML and ``output_type``; the same task without images loads."""
    for name, extra in (("mc", "doc_to_choice: [a, b]\ndoc_to_image: [image]\n"), ("mc_text", "doc_to_choice: [a, b]\n")):
        d = _suite(tmp_path, name, extra)
        (d / "t.yaml").write_text((d / "t.yaml").read_text().replace("generate_until", output_type))
    with pytest.raises(ConfigError) as ei:
        load_suite("mc", tmp_path)
    assert (ei.value.path, ei.value.field) == (tmp_path / "mc" / "t.yaml", "output_type")
    assert f"is {output_type!r}, but the task sets doc_to_image" in ei.value.message
    assert load_suite("mc_text", tmp_path).modality == "text"


def test_a_suite_module_call_for_an_undeclared_suite_is_refused_at_load(tmp_path: Path) -> None:
    """A suite whose Python loads another suite's module (``taskcode.suite_module``) must list that suite in
    ``metadata.evalgate.uses_suites`` (else the other suite's files would not key its results): refused when the
    suite is read, naming the YAML that references the module and the field; declared, it loads and is hashed with
    the used suite. The shipped docpages declares docparse."""
    _suite(tmp_path, "base")
    user = _suite(tmp_path, "user")
    (user / "t.yaml").write_text((user / "t.yaml").read_text().replace("'{{q}}'", "!function helpers.doc_to_text"))
    (user / "helpers.py").write_text("from evalgate.suites import taskcode\n\n"
                                     "base = taskcode.suite_module(__file__, suite='base', name='utils')\n\n\n"
                                     "def doc_to_text(doc):\n    return doc['q']\n")
    with pytest.raises(ConfigError) as ei:
        load_suite("user", tmp_path)
    assert (ei.value.path, ei.value.field) == (user / "t.yaml", "metadata.evalgate.uses_suites")
    assert "helpers.py line 3 loads a module of suite 'base' (suite_module)" in ei.value.message
    (user / "t.yaml").write_text((user / "t.yaml").read_text() + "metadata:\n  evalgate: {uses_suites: [base]}\n")
    assert load_suite("user", tmp_path).uses == ("base",)
    assert load_suite("docpages", SUITES_DIR).uses == ("docparse",)
