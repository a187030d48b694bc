"""Reading a source file as Python does: bytes to text (BOM, PEP 263 cookie, UTF-8)."""

from __future__ import annotations

import io
import re
import tokenize
from typing import Optional


def decode_source(data: bytes) -> tuple[Optional[str], str]:
    """Decode as Python does (BOM, PEP 263 coding cookie, else UTF-8)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        return None, f"cannot decode file: {error.msg if hasattr(error, 'msg') else error}"
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as error:
        reason = error.reason if isinstance(error, UnicodeDecodeError) else str(error)
        return None, f"cannot decode file as {encoding}: {reason}"
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, ""


# C0 and C1 control characters (an ESC in a file name would recolour the user's
# terminal) and the bidirectional overrides that make text read differently
# from what it is ("Trojan Source").
_UNPRINTABLE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with control characters shown literally (``\\x1b``), for a terminal
    or a CI log; tabs are kept (code frames align with them)."""
    return _UNPRINTABLE.sub(lambda match: _escape(match.group()), text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


# Lines as Python's tokenizer splits them: at \r\n, \r or \n (not at the form
# feeds and other separators ``str.splitlines`` also splits at).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(source: str) -> list[str]:
    """Lines with their endings, split where Python's tokenizer splits them."""
    return _LINE.findall(source)
