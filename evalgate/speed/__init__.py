"""What a switch buys: the traffic profile and speed-up statistics (``speedup``), the offline and serve-mode
measurement (``measure``, ``serve``), the precision rule (``precision``) and the cost per token (``economics``).

Modules: ``economics``, ``measure``, ``precision``, ``serve``, ``speedup``.
"""
