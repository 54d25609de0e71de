"""Stage 5, render: the verdict document (``verdict``, built by ``document``), the HTML page and terminal table
(``render``, ``plot``, ``templates/``), the machine-readable outputs (JUnit, Markdown) and shared wording.

Modules: ``document``, ``outputs``, ``plot``, ``render``, ``verdict``, ``wording``.
"""
