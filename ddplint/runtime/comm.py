"""CommCounter: count DDP all-reduce calls and bytes per optimizer step with a comm hook."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


@dataclass
class StepComm:
    calls: int
    bytes: int


class CommCounter:
    """A DDP comm hook that counts every bucket all-reduce, then runs the real reduction.

    Composes with a user hook: ``CommCounter(hook=my_hook, state=my_state)`` counts and then
    calls ``my_hook(my_state, bucket)``; without one it runs the default all-reduce on the
    model's process group.  Call ``step()`` after each ``optimizer.step()``.

        counter = CommCounter().register(ddp_model)
        ...; optimizer.step(); counter.step()
        counter.per_step  # [StepComm(calls=4, bytes=...), ...]
    """

    def __init__(self, hook: Callable[[Any, Any], torch.futures.Future] | None = None, state: Any = None):
        self.hook = hook
        self.state = state
        self.process_group = None
        self.calls = 0  # since the last step()
        self.bytes = 0
        self.per_step: list[StepComm] = []

    def register(self, ddp_model: torch.nn.parallel.DistributedDataParallel) -> "CommCounter":
        self.process_group = ddp_model.process_group
        ddp_model.register_comm_hook(self, _counting_hook)
        return self

    def step(self) -> StepComm:
        done = StepComm(self.calls, self.bytes)
        self.per_step.append(done)
        self.calls = self.bytes = 0
        return done

    @property
    def total_calls(self) -> int:
        return sum(s.calls for s in self.per_step) + self.calls

    @property
    def total_bytes(self) -> int:
        return sum(s.bytes for s in self.per_step) + self.bytes


def _counting_hook(counter, bucket):
    # No annotations: DDP rejects string annotations (from __future__) on comm hooks.
    buf = bucket.buffer()
    counter.calls += 1
    counter.bytes += buf.numel() * buf.element_size()
    if counter.hook is not None:
        return counter.hook(counter.state, bucket)
    return default_hooks.allreduce_hook(counter.process_group, bucket)
