"""Build hook (metadata lives in pyproject.toml): ship the repository's top-level ``configs/``, ``suites/`` and
``thresholds.yaml`` inside the wheel, as ``evalgate/_builtin/``, so a non-editable install has the built-in gate
(``evalgate.inputs.project.builtin_dir``). The folders stay at the top of the repository, where users and CI edit them;
an editable install reads them there."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUILTIN = ("configs", "suites", "thresholds.yaml")


class BuildPyWithBuiltins(build_py):
    """``build_py`` that also copies the built-in gate files into ``<build_lib>/evalgate/_builtin``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # the editable package reads the top-level folders themselves
        dest = Path(self.build_lib) / "evalgate" / "_builtin"
        for name in BUILTIN:
            src, out = ROOT / name, dest / name
            if src.is_dir():
                shutil.copytree(src, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, out)


setup(cmdclass={"build_py": BuildPyWithBuiltins})
