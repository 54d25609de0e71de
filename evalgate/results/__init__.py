"""The records that flow between stages (``records``: items, tasks) and the content-addressed result store with
its generation journal (``store``).

Modules: ``records``, ``store``.
"""
