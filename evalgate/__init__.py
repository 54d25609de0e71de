"""evalgate: an accuracy-regression gate for LLM serving speed-ups.

Data flows one way, in ``evalgate.commands.pipeline.gate``: load (config, thresholds, suites) -> evaluate both sides
(engine, store) -> compare (paired statistics) -> decide (gate) -> render (document, report, outputs).
The public surface is small; the CLI (``evalgate``) is the main entry point.
"""

from evalgate.inputs.config import EngineConfig, load_config
from evalgate.errors import ConfigError, EngineError, EvalgateError, ExitCode, StoreError
from evalgate.gate import Decision, Verdict, decide
from evalgate.inputs.thresholds import load_thresholds

__all__ = ["ConfigError", "Decision", "EngineConfig", "EngineError", "EvalgateError", "ExitCode", "StoreError",
           "Verdict", "decide", "load_config", "load_thresholds"]
__version__ = "0.1.0"
