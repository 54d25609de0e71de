"""Stage 1, what the user gives: the strict YAML reader, engine configs, ``thresholds.yaml``, run options, the
project layout, chat sections and recorded request logs, each read and checked into a typed model before any
engine starts.

Modules: ``chat``, ``config``, ``options``, ``project``, ``replay`` (the replay gate's requests), ``requestlog``,
``schema``, ``thresholds``, ``yamlio``.
"""
