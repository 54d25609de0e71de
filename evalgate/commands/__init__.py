"""One module per subcommand, each returning data or an exit code; ``evalgate.cli`` parses and prints. ``pipeline``
is the gate top to bottom (load -> evaluate -> compare -> decide -> render); ``jobs`` says where its two sides come
from (engines or stored runs).

Modules: ``ablate``, ``changed_configs``, ``jobs``, ``pipeline``, ``plan``, ``score``, ``stored``.
"""
