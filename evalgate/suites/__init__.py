"""The evaluation suites: discovery and content hashes, suite files and their data, lm-eval's task index, and the
API that suite authors use (scoring overlapped with generation, the sandbox that runs generated code).

Modules: ``data``, ``discovery``, ``files``, ``sandbox``, ``scoring``, ``taskcode``, ``taskindex``, ``tasknotes``.
"""
