"""What a switch buys: the traffic profile (``profile.TrafficProfile``, one typed model from the thresholds to
``verdict.json``) and speed-up statistics (``speedup``), the offline and serve-mode measurement (``measure``,
``serve``), the precision rule (``precision``) and the cost per token (``economics``); the measured ``speed`` block
they hand to the gate and the report is typed (``block.SpeedBlock``).

Modules: ``block``, ``economics``, ``measure``, ``precision``, ``profile``, ``serve``, ``speedup``.
"""
