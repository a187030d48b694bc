"""DDP013 no-sync-forward-outside: ``no_sync`` around backward only does nothing.

DDP decides in ``forward`` whether the coming backward all-reduces, so a forward outside
``no_sync`` arms the reducer and the backward inside still syncs.  Compares the all-reduce
calls per optimizer step with ``no_sync`` around backward only (pattern) against no
``no_sync`` at all: they are equal (k each); the DDP002 probe shows the working fix (1).
"""

from __future__ import annotations

from ddplint.runtime.harness import ProbeContext
from ddplint.runtime.probes.ddp002_no_sync import compare

RULE, NAME = "DDP013", "no-sync-forward-outside"


def run(ctx: ProbeContext):
    res = compare(ctx, "bwd_only", "none", RULE, NAME, expect_equal=True)
    res.detail += " no_sync around backward only = no no_sync at all; move the forward inside."
    return res
