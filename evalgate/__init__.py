"""evalgate: an accuracy-regression gate for LLM serving speed-ups.

One gate, top to bottom (``evalgate.commands.pipeline.gate``), each stage a package that imports only the ones below
it (the import-linter contract in ``pyproject.toml``):

* ``inputs``   read and check what the user gives: configs, ``thresholds.yaml``, run options, request logs;
* ``suites``   discover the evaluation suites, hash them, and the API suite authors use (scoring, sandbox);
* ``evaluate`` evaluate both sides: pre-flight, the engine worker's parent side, placement on one GPU, manifest;
  ``worker`` is the engine worker process itself (vLLM + lm-eval), ``engine`` what the parent may know of vLLM;
* ``compare``  pair the items and compute each task's paired difference, intervals and power (pure);
* ``speed``    what the switch buys: the traffic profile, the measured speed-up, precision and cost;
* ``gate``     every rule that decides the verdict (pure);
* ``report``   the verdict document and its renderings (HTML, terminal, JUnit, Markdown);
* ``commands`` one module per subcommand; ``evalgate.cli`` parses the command line and prints.

``results`` holds the records that flow between stages and the result store; ``models`` the embedded models.
The public surface is small; the CLI (``evalgate``) is the main entry point.
"""

from evalgate._version import __version__
from evalgate.errors import ConfigError, EngineError, EvalgateError, ExitCode, StoreError
from evalgate.gate import Decision, Verdict, decide
from evalgate.inputs.config import EngineConfig, load_config
from evalgate.inputs.thresholds import load_thresholds

__all__ = ["ConfigError", "Decision", "EngineConfig", "EngineError", "EvalgateError", "ExitCode", "StoreError",
           "Verdict", "__version__", "decide", "load_config", "load_thresholds"]
