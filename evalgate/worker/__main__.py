"""``python -m evalgate.worker SPEC``: the engine worker process's entry point (started by ``evaluate.runner``)."""

import sys

from evalgate.worker.main import main

sys.exit(main(sys.argv[1]))
