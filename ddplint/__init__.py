"""ddplint: a static linter for PyTorch distributed training code.

The linter half never imports torch; the runtime half (``ddplint.runtime``) does,
lazily, and only when asked to confirm a rule or when a user's test imports it.
"""

__version__ = "0.1.0"
