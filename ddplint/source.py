"""Reading a source file as Python does: bytes to text (BOM, PEP 263 cookie, UTF-8)."""

from __future__ import annotations

import io
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
