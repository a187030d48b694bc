"""Instrument torch from outside the user's script; runs right after ``import torch``.

What is patched, and why each one:

- ``init_process_group`` (and ``new_group``): the collective timeout becomes ``--timeout``,
  ``--device cpu`` forces gloo, and the rank's ``Recorder`` starts (only ranks record anything).
- ``destroy_process_group``: a no-op once the recorder destroyed the group at ``--steps``,
  so that the script's own ``finally: destroy_process_group()`` does not fail.
- the global optimizer step hooks (``register_optimizer_step_pre/post_hook``): step
  boundaries and the optimizer phase.
- ``DistributedDataParallel``: a counting comm hook on every DDP model as it is built;
  a hook the user registers later is wrapped by it instead of replacing it.
- the ``torch.distributed`` collectives: each one the script issues is counted and logged
  with its call site (a hang then names the collective and the line).
- ``DataLoader``: batches consumed and time spent waiting for data, per loader.
- ``Tensor.backward``: the backward phase and the call site of the gradient all-reduce.
- ``torch.multiprocessing``'s spawn wrapper: an exception in an ``mp.spawn`` rank is
  caught there (it never reaches ``sys.excepthook``), so record it on the way.
"""

from __future__ import annotations

import datetime
import functools
import inspect
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from ddplint.runtime.smoke import recorder as rec_module
from ddplint.runtime.smoke.events import EventFile, user_site
from ddplint.runtime.smoke.rankside import (
    ENV_BACKEND, ENV_DEVICE, ENV_DIR, ENV_STEPS, ENV_TIMEOUT, record_exception,
)

COLLECTIVES = (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter", "barrier",
    "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
    "monitored_barrier",
)

# Collectives issued inside another counted one (all_gather_object -> all_gather, our comm
# hook -> all_reduce) are part of it, not the script's own.
_inside = threading.local()

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    _patch_init_and_destroy()
    register_optimizer_step_pre_hook(_optimizer_pre)
    register_optimizer_step_post_hook(_optimizer_post)
    _patch_ddp()
    for name in COLLECTIVES:
        _patch_collective(name)
    _patch_dataloader()
    _patch_backward()
    _patch_spawn_wrapper()


def _set_everywhere(name: str, value) -> None:
    """Replace ``name`` in torch.distributed and distributed_c10d (the same function)."""
    for module in (dist, c10d):
        if hasattr(module, name):
            setattr(module, name, value)


def _outermost() -> bool:
    return getattr(_inside, "depth", 0) == 0


# ------------------------------------------------------------------ process group


def _patch_init_and_destroy() -> None:
    real_init, real_destroy = c10d.init_process_group, c10d.destroy_process_group

    @functools.wraps(real_init)
    def init_process_group(*args, **kwargs):
        bound = inspect.signature(real_init).bind(*args, **kwargs)
        requested_backend = bound.arguments.get("backend")
        requested_timeout = bound.arguments.get("timeout")
        forced = os.environ.get(ENV_BACKEND, "")
        if forced and requested_backend != forced:
            bound.arguments["backend"] = forced
        timeout_s = float(os.environ.get(ENV_TIMEOUT, "60"))
        bound.arguments["timeout"] = datetime.timedelta(seconds=timeout_s)
        result = real_init(*bound.args, **bound.kwargs)
        if rec_module.current() is None:
            _start_recorder(requested_backend, requested_timeout, timeout_s, real_destroy)
        return result

    @functools.wraps(real_destroy)
    def destroy_process_group(group=None):
        recorder = rec_module.current()
        if group is None and recorder is not None and recorder.destroyed:
            return None  # ddplint smoke stopped the run and destroyed it already
        return real_destroy(group)

    real_new_group = c10d.new_group

    @functools.wraps(real_new_group)
    def new_group(*args, **kwargs):
        # Subgroups get the same bounded timeout: a hang in one must end in a diagnosis too.
        bound = inspect.signature(real_new_group).bind(*args, **kwargs)
        bound.arguments["timeout"] = datetime.timedelta(seconds=float(os.environ.get(ENV_TIMEOUT, "60")))
        return real_new_group(*bound.args, **bound.kwargs)

    _set_everywhere("init_process_group", init_process_group)
    _set_everywhere("destroy_process_group", destroy_process_group)
    _set_everywhere("new_group", new_group)


def _start_recorder(requested_backend, requested_timeout, timeout_s: float, real_destroy) -> None:
    events = EventFile.for_process(os.environ[ENV_DIR])
    device = os.environ.get(ENV_DEVICE, "cpu")
    recorder = rec_module.start(events=events, rank=dist.get_rank(), world_size=dist.get_world_size(),
                                steps_limit=int(os.environ.get(ENV_STEPS, "10")), timeout_s=timeout_s,
                                device=device, destroy=real_destroy)
    events.emit("init", rank=recorder.rank, world_size=recorder.world_size, pid=os.getpid(),
                local_rank=_int_env("LOCAL_RANK"), backend=dist.get_backend(),
                backend_requested=str(requested_backend) if requested_backend else None,
                timeout_s=timeout_s,
                timeout_requested_s=requested_timeout.total_seconds() if requested_timeout else None,
                device=device, memory_kind=recorder.memory.kind, steps_limit=recorder.steps_limit,
                torch=torch.__version__, fr_enabled=bool(os.environ.get("TORCH_FR_BUFFER_SIZE")))


def _int_env(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value and value.lstrip("-").isdigit() else None


def _group_name(group) -> str:
    if group is None or group is c10d.GroupMember.WORLD:
        return "world"
    try:
        return "world" if group == c10d._get_default_group() else str(group.group_name)
    except Exception:
        return "world"


# ------------------------------------------------------------------ optimizer steps


def _optimizer_pre(optimizer, args, kwargs) -> None:
    recorder = rec_module.current()
    if recorder is not None:
        recorder.optimizer_started(optimizer)


def _optimizer_post(optimizer, args, kwargs) -> None:
    recorder = rec_module.current()
    if recorder is not None:
        recorder.optimizer_finished(optimizer)  # may stop the rank (SystemExit)


# ------------------------------------------------------------------ DDP


class _HookState:
    """State of the counting comm hook: the hook it runs after counting (the user's, or
    None for the default all-reduce) and that hook's own state."""

    def __init__(self, process_group, model: int, hook=None, state=None) -> None:
        self.process_group = process_group
        self.model = model  # which DDP model of this rank
        self.hook = hook
        self.state = state


def _counting_comm_hook(state, bucket):
    # No annotations: DDP checks a hook's signature and rejects string annotations.
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    recorder = rec_module.current()
    if recorder is None:  # a hook state of another process group's life
        return _run_inner(state, bucket, default_hooks)
    buffer = bucket.buffer()
    entry = recorder.enter("DDP gradient all_reduce", _group_name(state.process_group),
                           buffer.numel() * buffer.element_size(), recorder.backward_site or user_site(),
                           bucket=bucket.index(), last=bucket.is_last(), model=state.model)
    start = _cuda_event() if buffer.is_cuda else None
    future = _run_inner(state, bucket, default_hooks)

    def finished(fut):
        value = fut.value()  # raises when the all-reduce failed: the entry stays in flight
        # This callback runs on a stream that waits for the NCCL work: an event recorded here
        # marks the end of the all-reduce on the device.
        recorder.leave(entry, (start, _cuda_event()) if start is not None else None)
        return value

    return future.then(finished)


def _cuda_event():
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def _run_inner(state, bucket, default_hooks):
    _inside.depth = getattr(_inside, "depth", 0) + 1
    try:
        if state.hook is not None:
            return state.hook(state.state, bucket)
        return default_hooks.allreduce_hook(state.process_group, bucket)
    finally:
        _inside.depth -= 1


def _patch_ddp() -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    real_init, real_register = DDP.__init__, DDP.register_comm_hook
    real_builtin, real_call = DDP._register_builtin_comm_hook, DDP.__call__
    constructing = threading.local()

    @functools.wraps(real_init)
    def __init__(self, *args, **kwargs):
        constructing.hook = None
        constructing.active = True
        try:
            real_init(self, *args, **kwargs)
        finally:
            constructing.active = False
        recorder = rec_module.current()
        if recorder is None or getattr(self, "reducer", None) is None:
            return
        state = _HookState(self.process_group, recorder.new_model(self.parameters()))
        if constructing.hook is not None:  # DDP registered one itself (mixed precision)
            state.state, state.hook = constructing.hook
        real_register(self, state, _counting_comm_hook)
        self._ddplint_smoke_hook = state

    @functools.wraps(real_register)
    def register_comm_hook(self, state, hook):
        if getattr(constructing, "active", False) and rec_module.current() is not None:
            constructing.hook = (state, hook)
            return None
        ours = getattr(self, "_ddplint_smoke_hook", None)
        if ours is None:
            return real_register(self, state, hook)
        ours.state, ours.hook = state, hook  # counted, then the user's hook runs
        return None

    @functools.wraps(real_builtin)
    def _register_builtin_comm_hook(self, comm_hook_type):
        ours = getattr(self, "_ddplint_smoke_hook", None)
        if ours is None:
            return real_builtin(self, comm_hook_type)
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        builtin = {dist.BuiltinCommHookType.ALLREDUCE: default_hooks.allreduce_hook,
                   dist.BuiltinCommHookType.FP16_COMPRESS: default_hooks.fp16_compress_hook}
        ours.state, ours.hook = self.process_group, builtin[comm_hook_type]
        return None

    @functools.wraps(real_call)
    def __call__(self, *args, **kwargs):
        recorder = rec_module.current()
        if recorder is None:
            return real_call(self, *args, **kwargs)
        recorder.touch()
        if recorder.steps == 0:
            # FLOPs of the first step (forward, backward, optimizer).  Entered before the
            # module call, not inside forward, so that the counter's module hooks pair up.
            recorder.flops.begin()
        t0 = time.perf_counter()
        try:
            return real_call(self, *args, **kwargs)
        finally:
            recorder.phase("forward", time.perf_counter() - t0)

    DDP.__init__ = __init__
    DDP.register_comm_hook = register_comm_hook
    DDP._register_builtin_comm_hook = _register_builtin_comm_hook
    DDP.__call__ = __call__


# ------------------------------------------------------------------ collectives


def _tensor_bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def _patch_collective(name: str) -> None:
    real = getattr(c10d, name, None)
    if real is None:
        return
    signature = inspect.signature(real)

    @functools.wraps(real)
    def collective(*args, **kwargs):
        recorder = rec_module.current()
        if recorder is None or not _outermost():
            return real(*args, **kwargs)
        try:
            arguments = signature.bind(*args, **kwargs).arguments
        except TypeError:
            return real(*args, **kwargs)  # let torch report the bad call
        first = next(iter(arguments.values()), None)
        entry = recorder.enter(name, _group_name(arguments.get("group")), _tensor_bytes(first), user_site())
        _inside.depth = getattr(_inside, "depth", 0) + 1
        try:
            result = real(*args, **kwargs)
        finally:
            _inside.depth -= 1
        # An async_op collective is done from here on as far as the log goes: its wait()
        # is the script's business.  A failed one raised above and stays in flight.
        recorder.leave(entry)
        return result

    _set_everywhere(name, collective)


# ------------------------------------------------------------------ data and backward


def _batch_samples(batch) -> int:
    """Samples in a batch: the leading dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            n = _batch_samples(item)
            if n:
                return n
    return 0


def _patch_dataloader() -> None:
    from torch.utils.data import DataLoader
    from torch.utils.data import dataloader as dl

    real_loader_init = DataLoader.__init__
    real_iter_init, real_next = dl._BaseDataLoaderIter.__init__, dl._BaseDataLoaderIter.__next__
    labels: dict[str, int] = {}

    @functools.wraps(real_loader_init)
    def loader_init(self, *args, **kwargs):
        real_loader_init(self, *args, **kwargs)
        site = user_site()
        where = f"{os.path.basename(site[0])}:{site[1]}" if site else "DataLoader"
        labels[where] = labels.get(where, 0) + 1
        # Loaders built at one line (a helper) are told apart by their order.
        self._ddplint_smoke = (where if labels[where] == 1 else f"{where}#{labels[where]}", site)

    @functools.wraps(real_iter_init)
    def iter_init(self, loader, *args, **kwargs):
        real_iter_init(self, loader, *args, **kwargs)
        label, site = getattr(loader, "_ddplint_smoke", ("DataLoader", None))
        self._ddplint_smoke_label = label
        recorder = rec_module.current()
        if recorder is not None:
            try:
                length = len(loader)
            except TypeError:  # an IterableDataset without __len__
                length = None
            recorder.loader(label, site, length)

    @functools.wraps(real_next)
    def next_batch(self):
        recorder = rec_module.current()
        if recorder is None:
            return real_next(self)
        recorder.touch()
        t0 = time.perf_counter()
        batch = real_next(self)  # StopIteration passes through uncounted
        recorder.batch(getattr(self, "_ddplint_smoke_label", "DataLoader"), _batch_samples(batch),
                       time.perf_counter() - t0)
        return batch

    DataLoader.__init__ = loader_init
    dl._BaseDataLoaderIter.__init__ = iter_init
    dl._BaseDataLoaderIter.__next__ = next_batch


def _patch_backward() -> None:
    real_backward = torch.Tensor.backward

    @functools.wraps(real_backward)
    def backward(self, *args, **kwargs):
        recorder = rec_module.current()
        if recorder is None:
            return real_backward(self, *args, **kwargs)
        recorder.touch()
        recorder.backward_site = user_site()
        t0 = time.perf_counter()
        try:
            return real_backward(self, *args, **kwargs)
        finally:
            recorder.phase("backward", time.perf_counter() - t0)

    torch.Tensor.backward = backward


def _patch_spawn_wrapper() -> None:
    spawn_module = sys.modules.get("torch.multiprocessing.spawn")
    if spawn_module is None or not hasattr(spawn_module, "_wrap"):
        return
    real_wrap = spawn_module._wrap

    @functools.wraps(real_wrap)
    def _wrap(fn, i, args, error_file):
        def recording(*fn_args):
            try:
                return fn(*fn_args)
            except Exception as exc:
                record_exception(exc, spawn_index=i)
                raise

        return real_wrap(recording, i, args, error_file)

    spawn_module._wrap = _wrap
