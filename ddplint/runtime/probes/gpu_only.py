"""Rules whose effect only exists with GPUs (device placement) or several GPUs/nodes.

On a machine without them the honest answer is "not applicable here" with the reason; the
effect cannot be shown with CPU tensors, which have no device index.
"""

from __future__ import annotations

from types import SimpleNamespace

from ddplint.runtime.harness import ProbeResult, not_applicable

_NEEDS = {
    "DDP007": ("hardcoded-device", "needs CUDA with one GPU per rank: a literal cuda:0 puts every "
               "rank's allocations on GPU 0; CPU tensors have no device index"),
    "DDP012": ("syncbn-after-ddp-wrap", "needs CUDA: SyncBatchNorm only runs on GPU devices"),
    "DDP016": ("data-parallel-instead-of-ddp", "needs 2 or more CUDA GPUs: DataParallel only "
               "replicates across GPUs"),
    "DDP017": ("global-rank-as-device", "needs CUDA on more than one node: the global rank exceeds "
               "the local device count only on node 2"),
    "DDP018": ("worker-without-set-device", "needs CUDA with one GPU per rank: without set_device "
               "every rank lands on GPU 0"),
    "DDP019": ("load-without-map-location", "needs CUDA: torch.load restores tensors onto the GPU "
               "they were saved from"),
    "DDP022": ("local-rank-from-argv", "needs CUDA with one GPU per rank (and a torchrun launch): "
               "the effect is every rank choosing device 0"),
}


def probe(rule: str) -> SimpleNamespace:
    name, reason = _NEEDS[rule]

    def run(ctx) -> ProbeResult:  # pragma: no cover - not_applicable always answers first
        return not_applicable(rule, name, reason)

    def why(ctx) -> str:
        if ctx.is_cuda:
            return f"no CUDA measurement implemented yet for this rule ({reason})"
        return reason

    return SimpleNamespace(RULE=rule, NAME=name, not_applicable=why, run=run)
