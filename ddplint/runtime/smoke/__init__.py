"""``ddplint smoke``: the small-run gate on the user's own training script.

The parent (``runner``) lints the script, launches it unmodified on a few ranks through
PyTorch's own launcher and reads back what every rank recorded; the ranks are instrumented
from outside by a ``sitecustomize`` on their import path (``bootstrap``) that waits for
``import torch`` (``rankside``) and then patches torch (``patches``) to feed a per-rank
``Recorder``.  ``telemetry`` parses the ranks' event files, ``gates`` turns them into
checks, ``join`` ties checks to the static findings, ``report`` prints them.

Nothing here imports torch at module import time: the sitecustomize runs in every Python
process of the run, including ones that never touch torch.
"""
