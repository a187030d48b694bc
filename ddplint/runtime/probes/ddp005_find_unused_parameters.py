"""DDP005 find-unused-parameters: step time with ``find_unused_parameters=True`` vs without.

With the flag, DDP walks the autograd graph from the outputs after every forward to find
parameters that will get no gradient.  The cost grows with the number of graph nodes, so
the probe uses a deep, narrow model (many small layers, little arithmetic) where the
traversal is visible next to compute and communication.  Every parameter is used, so both
runs compute the same gradients; only the bookkeeping differs.  Time is per training step
(forward, backward with all-reduce, optimizer), over alternating blocks of steps.

Step time alone is a fragile verdict on a loaded machine (other processes steal whole
blocks), so the verdict rests on what the flag makes DDP do, measured where it happens:
after every forward DDP hands its reducer the outputs whose autograd graph it must search
(``prepare_for_backward``). A thin proxy in front of the reducer records, per step, whether
it was handed the outputs, the size of the graph reachable from them (the nodes the search
visits), and the CPU time of this thread spent inside the call (CPU time, not wall time:
waiting for a busy CPU does not count).
"""

from __future__ import annotations

import time

import torch

from ddplint.runtime.harness import Measurement, ProbeContext, Stats, batch, ddp, mlp, mse, result

RULE, NAME = "DDP005", "find-unused-parameters"
WIDTH, DEPTH, STEPS_PER_REPEAT = 16, 128, 8


class _ReducerProbe:
    """Stands in front of ``model.reducer`` for DDP's Python side and watches
    ``prepare_for_backward``; everything else goes to the real reducer."""

    def __init__(self, reducer) -> None:
        self._reducer = reducer
        self.calls = 0
        self.calls_with_outputs = 0
        self.graph_nodes = 0  # nodes reachable from the outputs handed over (counted once)
        self.cpu_s = 0.0  # this thread's CPU time inside prepare_for_backward

    def prepare_for_backward(self, outputs) -> None:
        self.calls += 1
        if outputs:
            self.calls_with_outputs += 1
            if not self.graph_nodes:  # the graph is the same every step; walk it once
                self.graph_nodes = _graph_size(outputs)
        started = time.thread_time()
        self._reducer.prepare_for_backward(outputs)
        self.cpu_s += time.thread_time() - started

    def __getattr__(self, name: str):
        return getattr(self._reducer, name)


def _graph_size(outputs) -> int:
    """Autograd nodes reachable from ``outputs`` (what the reducer's search visits)."""
    seen, stack = set(), [t.grad_fn for t in outputs if getattr(t, "grad_fn", None) is not None]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)


def _trainer(ctx: ProbeContext, find_unused: bool):
    model = ddp(ctx, mlp(width=WIDTH, depth=DEPTH), find_unused_parameters=find_unused)
    watch = model.reducer = _ReducerProbe(model.reducer)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    xy = batch(0, ctx.rank, size=8, width=WIDTH, device=ctx.device)

    def block() -> float:
        t0 = time.perf_counter()
        for _ in range(STEPS_PER_REPEAT):
            opt.zero_grad(set_to_none=True)
            mse(model, xy).backward()
            opt.step()
        return (time.perf_counter() - t0) / STEPS_PER_REPEAT

    return block, watch


def run(ctx: ProbeContext):
    (pattern, p_watch), (fixed, f_watch) = _trainer(ctx, True), _trainer(ctx, False)
    pattern(), fixed()  # warm-up (bucket rebuild, allocator)
    for watch in (p_watch, f_watch):
        watch.calls = watch.calls_with_outputs = 0
        watch.cpu_s = 0.0
    # Alternate blocks so load from other processes hits both alike.
    rounds = max(ctx.repeats, 7)
    p_times, f_times = [], []
    for _ in range(rounds):
        p_times.append(pattern())
        f_times.append(fixed())
    steps = rounds * STEPS_PER_REPEAT
    searched = Measurement("autograd nodes searched for unused parameters per step", "nodes",
                           p_watch.graph_nodes if p_watch.calls_with_outputs == steps else 0,
                           f_watch.graph_nodes if f_watch.calls_with_outputs else 0, rounds)
    cpu = Measurement("CPU time in the reducer's prepare_for_backward per step", "s",
                      p_watch.cpu_s / steps, f_watch.cpu_s / steps, rounds)
    step_time = Measurement.timed("time per training step", "s", Stats.of(p_times), Stats.of(f_times))
    fastest = min(p_times) / min(f_times)
    # The verdict: the search runs on every step with the flag and never without it, and
    # it costs CPU time (more than twice the bookkeeping of the call without it). Step
    # time is reported, not judged: under load it measures the machine, not the flag.
    confirmed = (searched.pattern > 0 and searched.fixed == 0 and f_watch.calls == steps
                 and cpu.pattern > 2 * cpu.fixed)
    detail = (f"{DEPTH} Linear layers of width {WIDTH} (every parameter used), {rounds} alternating blocks of "
              f"{STEPS_PER_REPEAT} steps: with the flag DDP handed its reducer the outputs on "
              f"{p_watch.calls_with_outputs} of {steps} steps and it searched a {p_watch.graph_nodes}-node "
              f"autograd graph each time ({_us(cpu.pattern)} of CPU per step in prepare_for_backward, "
              f"{_us(cpu.fixed)} without the flag); step time: fastest block {fastest:.2f}x, median "
              f"{step_time.ratio:.2f}x. Confirmed when the search runs on every step with the flag, never "
              "without it, and costs more than twice the CPU time of the call without it.")
    return result(RULE, NAME, confirmed, [searched, cpu, step_time], detail)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} us"
