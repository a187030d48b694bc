"""The per-file size budget (``--max-file-size``, config ``max-file-size``).

libcst's parse costs grow faster than the file: on the 2-core reference machine a
0.4 MB hand-written module takes about 1.5 s end to end, the largest file of the
torch package (1.4 MB) about 11 s, and a 10 MB generated file (800,000 one-line
assignments) minutes. Such files are generated code (protobuf modules, data
tables), so a file over the budget is not parsed at all, neither by the CPython
``ast`` screen nor by libcst: it gets one DDP000 notice saying so, and a run stays
bounded in time and memory whatever the inputs. Reading is bounded too: an
oversized file is streamed in chunks (to look for rule trigger words), never held
whole. benchmarks/RESULTS.md has the measurements behind the default.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Union

MB = 1_000_000
# The largest torch module under this budget lints in about 1.6 s of CPU time on
# the reference machine (benchmarks/RESULTS.md, "Per-file budget").
DEFAULT_MAX_FILE_SIZE = 400_000
_CHUNK = 1 << 20
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(kb|k|mb|m|b)?\s*$", re.I)
_UNIT = {None: MB, "m": MB, "mb": MB, "k": 1000, "kb": 1000, "b": 1}


class SizeError(ValueError):
    """A size that cannot be read; the message says what is accepted."""


def parse_size(value: Union[str, int, float]) -> int:
    """``"400KB"``, ``"0.4MB"``, ``"2 MB"``, ``2`` (megabytes) -> bytes; 0 means no limit."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SizeError(f"expected a size such as 0.4, \"400KB\" or \"2MB\" (0: no limit), not {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise SizeError(f"a size cannot be negative: {value!r}")
        return int(value * MB)
    match = _SIZE.match(value)
    if match is None:
        raise SizeError(f"expected a size such as 0.4, 400KB or 2MB (0: no limit), not {value!r}")
    number, unit = match.groups()
    return int(float(number) * _UNIT[unit.lower() if unit else None])


def format_size(size: int) -> str:
    """Bytes as megabytes with one decimal (more for small limits): ``10.2 MB``."""
    text = f"{size / MB:.1f}"
    if text == "0.0" and size:
        text = f"{size / MB:.3f}".rstrip("0")
    return f"{text} MB"


def too_large_message(size: int, limit: int) -> str:
    return (f"too large to analyse: {format_size(size)}, limit {format_size(limit)}; "
            "see --max-file-size")


@dataclass(frozen=True)
class TooLarge:
    """A file over the budget: its size and which of the asked words it contains."""

    size: int
    mentions: frozenset[bytes]


def over_budget(data: bytes, limit: int) -> bool:
    return limit > 0 and len(data) > limit


def words_in(data: bytes, words: Iterable[bytes]) -> frozenset[bytes]:
    return frozenset(word for word in words if word in data)


def read_within_budget(path: Path, limit: int, words: Iterable[bytes] = ()) -> Union[bytes, TooLarge]:
    """The file's bytes, or ``TooLarge`` when it has more than ``limit`` bytes
    (``limit`` 0: no limit). An oversized file is read in chunks, never whole,
    looking for ``words``. Raises OSError like ``Path.read_bytes``."""
    with open(path, "rb") as handle:
        if limit <= 0:
            return handle.read()
        data = handle.read(limit + 1)
        if len(data) <= limit:
            return data
        return _scan_rest(handle, data, tuple(words))


def _scan_rest(handle, head: bytes, words: tuple[bytes, ...]) -> TooLarge:
    if not words:  # only the size is wanted: no need to read the rest
        return TooLarge(max(len(head), os.fstat(handle.fileno()).st_size), frozenset())
    overlap = max((len(word) for word in words), default=1) - 1
    found = set(words_in(head, words))
    size, tail = len(head), head[-overlap:] if overlap else b""
    while True:
        chunk = handle.read(_CHUNK)
        if not chunk:
            return TooLarge(size, frozenset(found))
        size += len(chunk)
        window = tail + chunk
        found.update(word for word in words if word not in found and word in window)
        tail = window[-overlap:] if overlap else b""


# ---------------------------------------------------------------------- chains
# libcst's parser is superlinear in the length of a left-recursive chain: a
# chain of attribute accesses, calls, subscripts or binary operations
# (``y.a.a.a``, ``f()()()``, ``a + a + a``). Measured on the reference machine:
# 200 links take about 0.1-0.3 s, 1,000 links seconds, 5,000 links longer than a
# two-minute timeout. The longest chain in the torch package has 23 links.
# CPython's parser is linear, so a file whose crude count says a chain may be
# long is measured with ``ast`` first, and one over the limit is not parsed.
MAX_CHAIN_LINKS = 200
_NOT_LINK_CHARS = re.compile(r"[^.()\[\]{}+\-*/%@&|^\r\n\\]+")
_CHAIN_NODES = {"Attribute": "value", "Call": "func", "Subscript": "value", "BinOp": "left"}


def crude_longest_chain(source: str) -> int:
    """An upper bound (strings and comments count too) on the links of the longest
    chain: the most link characters (``. ( [`` and operators) in one logical line."""
    count = longest = depth = 0
    continued = False
    for char in _NOT_LINK_CHARS.sub("", source):
        if char in "\r\n":  # CR alone ends a line too (old Mac files)
            if depth <= 0 and not continued:
                longest, count, depth = max(longest, count), 0, 0
            continued = False
            continue
        continued = char == "\\"
        if char in "([{":
            depth += 1
            count += char != "{"
        elif char in ")]}":
            depth -= 1
        elif not continued:
            count += 1
    return max(longest, count)


def longest_chain(tree, nodes=None) -> tuple[int, int, int]:
    """The longest left-recursive chain in a CPython ``ast`` tree: (links, line,
    1-based column of its start). ``nodes``: the tree's nodes with every parent
    before its children, when the caller has them (``Subtrees.order``)."""
    import ast

    length: dict[int, int] = {}
    longest, where = 0, (1, 1)
    for node in reversed(nodes if nodes is not None else list(ast.walk(tree))):  # children before their parents
        field_name = _CHAIN_NODES.get(type(node).__name__)
        if field_name is None:
            continue
        links = 1 + length.get(id(getattr(node, field_name)), 0)
        length[id(node)] = links
        if links > longest:
            longest, where = links, (node.lineno, node.col_offset + 1)
    return longest, *where
