"""Stage 3, compare (pure): pair baseline and candidate items and compute each task's paired difference, its
intervals, power and minimum detectable effect, KL and output agreement, reasoning-token costs, and the replayed requests compared (``replay``).

Modules: ``agreement``, ``evidence``, ``intervals``, ``kl``, ``pairing``, ``power``, ``reasoning``, ``replay``, ``stats``.
"""
