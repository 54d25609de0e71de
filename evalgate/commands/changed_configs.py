"""Which configs a change needs gated: ``evalgate changed-configs --base REF`` (used by the pre-merge job).

From ``git diff --name-status BASE...HEAD`` (the changes since the merge base, as a pull request shows them):

* a config file added or modified under ``configs/`` is gated;
* a config whose inheritance chain (``extends``) or whose baseline's chain contains a changed file is
  gated too: its requested engine args or what it is compared against changed;
* a change under ``suites/`` or to ``thresholds.yaml`` gates every config that has a baseline;
* a config that no longer loads (for instance its parent was deleted) is listed, so its run fails visibly:
  an error is never a pass.

Root configs (no baseline, such as ``baseline``) are not gated themselves; their dependents are. Random-weight
configs (``engine_args.load_format: dummy``, e.g. ``configs/scale/``) are never listed: they gate speed only
(``evalgate run --speed-only``), and the job that reads this list gates quality.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from evalgate.errors import ConfigError
from evalgate.inputs.config import list_configs, load_config
from evalgate.inputs.speed_only import random_weights


def git_changed_files(base: str, head: str = "HEAD", cwd: Path | None = None) -> tuple[Path, list[Path]]:
    """The repository root and the files added or modified between the merge base of ``base`` and ``head``.

    Deleted files are left out (renames count as a deletion plus an addition).

    Raises:
        ConfigError: not a git repository, or ``base`` is unknown (in CI, check out with ``fetch-depth: 0``).
    """
    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:  # git's first line says what failed ("fatal: ..."); the rest is usage advice
            msg = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[0]
            raise ConfigError(f"git {' '.join(args)} failed: {msg} (in CI check out the base branch too, "
                              "e.g. actions/checkout with fetch-depth: 0)", field="--base")
        return proc.stdout

    root = Path(git("rev-parse", "--show-toplevel").strip())
    for flag, rev in (("--base", base), ("--head", head)):
        found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=cwd,
                               capture_output=True, text=True, check=False)
        if found.returncode != 0:
            raise ConfigError(f"unknown git revision {rev!r} (in CI check out the base branch too, e.g. "
                              "actions/checkout with fetch-depth: 0)", field=flag)
    out = git("diff", "--name-status", "--no-renames", "-z", f"{base}...{head}")
    fields = out.split("\0")
    changed = []
    for status, name in zip(fields[0::2], fields[1::2]):
        if status and not status.startswith("D"):
            changed.append((root / name).resolve())
    return root, changed


def affected_configs(changed: list[Path], configs_dir: Path, suites_dir: Path,
                     thresholds_file: Path) -> dict[str, str]:
    """Configs to gate for a set of changed files, each with the reason (see the module docstring).

    Args:
        changed: absolute paths of added or modified files.
        configs_dir, suites_dir, thresholds_file: the repository's configs, suites and thresholds.
    Returns:
        ``{config name: reason}`` in config-name order.
    """
    changed_set = {p.resolve() for p in changed}
    suites_root, thr = suites_dir.resolve(), thresholds_file.resolve()
    shared = sorted(p for p in changed_set if p == thr or p.is_relative_to(suites_root))
    out: dict[str, str] = {}
    for name in list_configs(configs_dir):
        try:
            cfg = load_config(name, configs_dir, check_engine_args=False)
            base = load_config(_baseline_ref(cfg.baseline, cfg.path), configs_dir,
                               check_engine_args=False) if cfg.baseline else None
        except ConfigError as exc:
            out[name] = f"does not load ({exc})"
            continue
        if base is None or random_weights(cfg):  # a root, or speed only (no quality to gate)
            continue
        if cfg.path in changed_set:
            out[name] = "config changed"
        elif hits := [p for p in cfg.chain[1:] if p in changed_set]:
            out[name] = f"extends {hits[0].stem}, which changed"
        elif any(p in changed_set for p in base.chain):
            out[name] = f"its baseline {base.name} changed"
        elif shared:
            out[name] = f"{_rel(shared[0], suites_root.parent)} changed"
    return out


def _baseline_ref(ref: str, config_path: Path) -> str:
    """A baseline name resolves next to the config's file first, then in configs/ (as ``evalgate run`` does)."""
    for near in (config_path.parent / ref, config_path.parent / f"{ref}.yaml"):
        if near.is_file():
            return str(near)
    return ref


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def changed_configs(base: str, head: str = "HEAD", *, configs_dir: Path, suites_dir: Path,
                    thresholds_file: Path, cwd: Path | None = None) -> dict[str, str]:
    """``affected_configs`` for the files changed between ``base`` and ``head`` in the git repository."""
    _, changed = git_changed_files(base, head, cwd or configs_dir)
    return affected_configs(changed, configs_dir, suites_dir, thresholds_file)
