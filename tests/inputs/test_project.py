"""The user's own gate project (configs/, suites/, thresholds.yaml found from the working directory upward), the
built-in fallback, and a non-editable install that ships the built-in gate inside the package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from evalgate.errors import ConfigError
from evalgate.inputs.project import builtin_dir, find_project, layout

ROOT = Path(__file__).resolve().parents[2]
TASK = "task: own_task\ncustom_dataset: !function utils.load_data\nmetric_list:\n  - metric: acc\n"
CONFIG = "description: the user's own baseline\nmodel: embedded:nemotron-h-tiny\nengine_args: {dtype: float32}\n"


def _project(root: Path, marker: str = "thresholds.yaml") -> Path:
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "own-base.yaml").write_text(CONFIG)
    (root / "suites" / "own").mkdir(parents=True)
    (root / "suites" / "own" / "t.yaml").write_text(TASK)
    (root / "suites" / "own" / "utils.py").write_text("def load_data(**_):\n    return {}\n")  # what TASK names
    if marker == "thresholds.yaml":
        shutil.copy(ROOT / "thresholds.yaml", root / "thresholds.yaml")
    elif marker == "evalgate.toml":
        (root / "evalgate.toml").write_text("")
    else:
        (root / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.evalgate]\n")
    return root


@pytest.mark.parametrize("marker", ["thresholds.yaml", "evalgate.toml", "pyproject.toml"])
def test_finds_the_nearest_project_upward(tmp_path: Path, marker: str) -> None:
    root = _project(tmp_path / "repo", marker)
    (root / "src" / "deep").mkdir(parents=True)
    found = find_project(root / "src" / "deep")
    assert found is not None and found[0] == root and found[1].startswith(marker)
    lay = layout(start=root / "src" / "deep")
    assert (lay.configs, lay.suites) == (root / "configs", root / "suites")
    assert lay.sources["configs"] == lay.sources["suites"] == "project"
    expect_thr = root / "thresholds.yaml" if marker == "thresholds.yaml" else builtin_dir() / "thresholds.yaml"
    assert lay.thresholds == expect_thr


def test_a_pyproject_without_the_table_is_not_a_project(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "a" / "evalgate.toml").write_text("")
    assert find_project(tmp_path / "a" / "b")[0] == tmp_path / "a"


def test_outside_any_project_the_built_in_ones(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("EVALGATE_SUITES", raising=False)
    lay = layout(start=tmp_path)
    assert lay.root is None
    assert (lay.configs, lay.suites, lay.thresholds) == (builtin_dir() / "configs", builtin_dir() / "suites",
                                                         builtin_dir() / "thresholds.yaml")
    assert set(lay.sources.values()) == {"built-in"}


def test_precedence_flag_env_table(tmp_path: Path, monkeypatch) -> None:
    root = _project(tmp_path / "repo", "evalgate.toml")
    (root / "gate" / "suites").mkdir(parents=True)
    (root / "evalgate.toml").write_text('suites = "gate/suites"\n')
    monkeypatch.delenv("EVALGATE_SUITES", raising=False)
    assert layout(start=root).suites == root / "gate" / "suites"
    monkeypatch.setenv("EVALGATE_SUITES", str(tmp_path))
    assert layout(start=root).sources["suites"] == "EVALGATE_SUITES"
    lay = layout(suites_dir=root / "suites", start=root)
    assert (lay.suites, lay.sources["suites"]) == (root / "suites", "--suites-dir")


@pytest.mark.parametrize(("text", "field", "words"), [
    ('suite = "x"\n', "tool.evalgate.suite", "unknown key; did you mean 'suites'?"),
    ("configs = 3\n", "tool.evalgate.configs", "must be a path (string), got 3"),
    ('configs = "nope"\n', "tool.evalgate.configs", "does not exist"),
    ("configs = [\n", None, "cannot read TOML"),
])
def test_bad_table(tmp_path: Path, text: str, field: str | None, words: str) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.evalgate]\n" + text)
    with pytest.raises(ConfigError) as e:
        layout(start=tmp_path)
    assert e.value.field == field and words in str(e.value) and str(tmp_path / "pyproject.toml") in str(e.value)


def test_help_documents_the_dirs_and_evalgate_suites() -> None:
    from evalgate.cli import build_parser

    text = build_parser().format_help()
    assert "EVALGATE_SUITES" in text and "evalgate.toml" in text
    run_help = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    assert "--suites-dir" in run_help and "--configs-dir" in run_help and "$EVALGATE_SUITES" in run_help


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """evalgate installed non-editable (``pip install --no-deps --no-build-isolation``) into a fresh venv whose other
    packages come from this interpreter's site-packages (a ``.pth`` line: no downloads, and its editable evalgate
    finder is not run, so only the installed copy is importable)."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "thresholds.yaml"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("evalgate", "configs", "suites"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_builtin"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "_evalgate_test_base.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    proc = subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q", str(src)],
                          capture_output=True, text=True, timeout=600, cwd=tmp, env=_clean_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    return venv


def _clean_env() -> dict[str, str]:
    """This environment without what would import another evalgate or pick other suites."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EVALGATE_SUITES")}


def _list(venv: Path, cwd: Path) -> list[str]:
    proc = subprocess.run([str(venv / "bin" / "evalgate"), "list"], cwd=cwd, capture_output=True, text=True,
                          env=_clean_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_non_editable_install_finds_the_project_then_the_built_in_gate(installed: Path, tmp_path: Path) -> None:
    pkg = Path(subprocess.run([str(installed / "bin" / "python"), "-c", "import evalgate; print(evalgate.__file__)"],
                              capture_output=True, text=True, cwd=tmp_path, env=_clean_env(),
                              check=True).stdout.strip()).parent
    assert pkg.is_relative_to(installed), f"imported {pkg}, not the installed copy"
    builtin = pkg / "_builtin"
    assert (builtin / "thresholds.yaml").read_bytes() == (ROOT / "thresholds.yaml").read_bytes()

    proj = _project(tmp_path / "proj")
    (proj / "sub").mkdir()
    for cwd in (proj, proj / "sub"):
        out = _list(installed, cwd)
        assert out[0] == f"project: {proj} (thresholds.yaml)"
        assert out[1].split() == ["configs:", str(proj / "configs"), "(project)"]
        assert out[2].split() == ["suites:", str(proj / "suites"), "(project)"]
        assert any(ln.split()[:1] == ["own-base"] for ln in out) and any(ln.split()[:2] == ["own", "own_task"]
                                                                         for ln in out)
        assert not any(ln.split()[:1] == ["fp16-state"] for ln in out)

    outside = tmp_path / "outside"
    outside.mkdir()
    out = _list(installed, outside)
    assert out[0].startswith(f"project: none found from {outside} upward")
    assert out[1].split() == ["configs:", str(builtin / "configs"), "(built-in)"]
    assert out[2].split() == ["suites:", str(builtin / "suites"), "(built-in)"]
    assert out[3].split() == ["thresholds:", str(builtin / "thresholds.yaml"), "(built-in)"]
    names = {ln.split()[0] for ln in out[4:] if ln.startswith("  ")}
    assert {"baseline", "fp16-state", "docparse", "finance", "coding"} <= names
