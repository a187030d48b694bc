import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def lint():
    """Lint a source string with the given selection; returns the FileResult."""
    from ddplint.config import Settings
    from ddplint.engine import Linter

    def run(source, select=("ALL",), filename="train.py", **settings):
        linter = Linter(Settings(select=tuple(select), root=Path.cwd(), **settings))
        return linter.lint_source(source, filename)

    return run
