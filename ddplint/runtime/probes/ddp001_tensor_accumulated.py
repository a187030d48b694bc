"""DDP001 tensor-accumulated-with-graph: what `losses.append(loss)` keeps alive, per step.

Runs the same loop twice, once appending the loss tensor and once ``loss.item()``:

* eval loop (no backward): the appended loss keeps its whole graph, so every step retains
  the activations autograd saved for backward. Measured with ``saved_tensors_hooks`` (each
  saved tensor stored detached in a weak holder; a holder is alive exactly as long as the
  graph that saved it) and by counting the autograd nodes reachable from the list.
* training loop (backward each step): backward frees the saved activations, but the graph
  skeleton (its nodes) stays reachable from the list.

On CUDA the probe also records ``torch.cuda.memory_allocated``.
"""

from __future__ import annotations

import torch

from ddplint.runtime.harness import Measurement, ProbeContext, batch, mlp, mse, result
from ddplint.runtime.memory import SavedTensorTracker, count_graph_nodes

RULE, NAME = "DDP001", "tensor-accumulated-with-graph"
WIDTH = 128


def _loop(ctx: ProbeContext, steps: int, keep_tensor: bool, train: bool) -> dict[str, list[float]]:
    model = mlp(width=WIDTH).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept: list = []
    series: dict[str, list[float]] = {"bytes": [], "nodes": [], "cuda": []}
    with SavedTensorTracker(ignore=model.parameters()) as saved:
        for step in range(steps):
            loss = mse(model, batch(step, ctx.rank, size=64, width=WIDTH, device=ctx.device))
            if train:
                opt.zero_grad()
                loss.backward()
                opt.step()
            kept.append(loss if keep_tensor else loss.item())  # the line under test  # noqa: DDP001
            series["bytes"].append(saved.live_bytes())
            series["nodes"].append(count_graph_nodes(kept))
            if ctx.is_cuda:
                series["cuda"].append(torch.cuda.memory_allocated(ctx.device))
    return series


def _per_step(series: list[float]) -> float:
    """Growth per step: what one more iteration adds to what the loop keeps alive."""
    return (series[-1] - series[0]) / (len(series) - 1) if len(series) > 1 else series[-1]


def run(ctx: ProbeContext):
    steps = max(3, ctx.steps_or(8))
    runs = {(loop, keep): _loop(ctx, steps, keep, loop == "training")
            for loop in ("eval", "training") for keep in (True, False)}
    ms = []
    for loop, key, metric, unit in (
        ("eval", "bytes", "eval loop: saved activations retained per step", "bytes"),
        ("eval", "nodes", "eval loop: autograd nodes retained per step", "nodes"),
        ("training", "nodes", "training loop: autograd nodes retained per step", "nodes"),
        ("training", "bytes", "training loop: saved activations retained per step", "bytes"),
    ) + ((("eval", "cuda", "eval loop: CUDA memory_allocated growth per step", "bytes"),) if ctx.is_cuda else ()):
        pat, fix = runs[(loop, True)][key], runs[(loop, False)][key]
        ms.append(Measurement(metric, unit, _per_step(pat), _per_step(fix), steps,
                              pattern_series=pat if key in ("bytes", "cuda") and loop == "eval" else None,
                              fixed_series=fix if key in ("bytes", "cuda") and loop == "eval" else None))
    eval_bytes, eval_nodes, train_nodes, train_bytes = ms[:4]
    confirmed = (eval_bytes.pattern > 0 and eval_bytes.fixed == 0 and eval_nodes.pattern > 0
                 and train_nodes.pattern > 0 and train_nodes.fixed == 0)
    detail = (f"{steps} steps, MLP width {WIDTH}, batch 64: appending the loss keeps "
              f"{eval_bytes.pattern:,.0f} saved bytes and {eval_nodes.pattern:.0f} graph nodes per eval step "
              f"and {train_nodes.pattern:.0f} nodes per training step (activations freed by backward: "
              f"{train_bytes.pattern:,.0f} bytes/step); loss.item() keeps nothing.")
    return result(RULE, NAME, confirmed, ms, detail)
