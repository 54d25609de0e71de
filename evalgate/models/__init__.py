"""The models evalgate ships: the embedded Gemma 3 270M conversion, the trained Nemotron-H hybrid with an MTP
head (``hybrid/checkpoint``) and the Qwen3-Next fixture built from a seed (``embedded``, ``hybrid``).

Modules: ``embedded``.
"""
