"""The records that flow between stages (``records``: items, tasks), the base of the typed parts of the documents
evalgate writes and reads back (``document``: ``Record``, ``Recorded``, ``Number``), the run manifest's model
(``manifest``: ``Manifest``, ``Side``), and the content-addressed result store with its generation journal
(``store``).

Modules: ``document``, ``manifest``, ``records``, ``store``.
"""
