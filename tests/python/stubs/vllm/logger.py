# SPDX-License-Identifier: MIT
"""vllm.logger: a logging.Logger to stderr; the test reads what it logged at ERROR
(logger.records)."""

import logging
import sys


class _Recorder(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


logger = logging.getLogger("vllm")
logger.setLevel(logging.INFO)
_stderr = logging.StreamHandler(sys.stderr)
_stderr.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(message)s"))
logger.addHandler(_stderr)
records = _Recorder()
logger.addHandler(records)
