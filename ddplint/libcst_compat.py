"""Mends for libcst's node validation where it rejects valid Python.

libcst validates each node it builds, also while parsing. Up to 1.9 its check of
``[(a if b else c)for x in y]`` (no space before ``for``) ignores the parentheses
of a conditional expression and raises CSTValidationError, so a file Python runs
could not be linted at all (a114 StyleGAN2_Pytorch's run_training.py). A
parenthesized expression is safe beside a keyword whatever it holds; that is what
libcst's own base class says (``BaseExpression._safe_to_use_with_word_operator``),
and the mend restores it for ``IfExp``, whose override forgot it.
"""

from __future__ import annotations

import libcst as cst

_ORIGINAL_IF_EXP_SAFETY = cst.IfExp._safe_to_use_with_word_operator


def _if_exp_safety(self: cst.IfExp, position) -> bool:
    return bool(self.lpar and self.rpar) or _ORIGINAL_IF_EXP_SAFETY(self, position)


def apply() -> None:
    """Install the mends (idempotent)."""
    if cst.IfExp._safe_to_use_with_word_operator is not _if_exp_safety:
        cst.IfExp._safe_to_use_with_word_operator = _if_exp_safety
