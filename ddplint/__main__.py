"""Allow ``python -m ddplint`` (and ``torchrun -m ddplint confirm ...``)."""

import os
import sys

# `python -m` puts the working directory first on sys.path. When that directory is
# the code being linted, its modules would shadow the standard library that ddplint
# imports later (a torch checkout has signal/, a project may have ast.py or
# json.py), so drop it: ddplint itself is already imported from where it lives.
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == os.getcwd():
    del sys.path[0]

from ddplint.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
