"""Stage 2, evaluate both sides: the suite pre-flight, the parent side of the engine worker (runner, processes),
where the two engines live on one GPU (placement), the run manifest and progress lines.

Modules: ``manifest``, ``placement``, ``preflight``, ``procs``, ``progress``, ``runner``.
"""
