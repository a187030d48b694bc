"""Probe registry: rule id -> the module that measures it.

A probe module defines RULE, NAME, ``run(ctx) -> ProbeResult`` and optionally
``not_applicable(ctx) -> str | None``.  Rules whose effect needs hardware we do not have
everywhere (several GPUs, several nodes) are listed in ``gpu_only`` with the reason.
"""

from __future__ import annotations

import importlib
from types import ModuleType, SimpleNamespace

_MODULES = {
    "DDP001": "ddp001_tensor_accumulated",
    "DDP002": "ddp002_no_sync",
    "DDP003": "ddp003_clip_before_unscale",
    "DDP004": "ddp004_scaler_bypass",
    "DDP005": "ddp005_find_unused_parameters",
    "DDP006": "ddp006_pin_memory",
    "DDP008": "ddp008_set_epoch",
    "DDP009": "ddp009_distributed_sampler",
    "DDP010": "ddp010_rank_conditional_collective",
    "DDP011": "ddp011_checkpoint_writers",
    "DDP013": "ddp013_no_sync_forward_outside",
    "DDP014": "ddp014_divergent_skip",
    "DDP015": "ddp015_destroy_process_group",
    "DDP020": "ddp020_rank0_load_after_wrap",
    "DDP021": "ddp021_optimizer_before_fsdp",
    "DDP023": "ddp023_fsdp1_clip",
    "DDP024": "ddp024_params_modified_after_wrap",
    "DDP025": "ddp025_wrapper_state_dict",
}

ALL = sorted(set(_MODULES) | {"DDP007", "DDP012", "DDP016", "DDP017", "DDP018", "DDP019", "DDP022"})


def resolve(rule_ids: list[str] | None) -> tuple[list[str], list[str]]:
    """(known ids in order, unknown ids). None selects every probe."""
    if rule_ids is None:
        return list(ALL), []
    ids = [r.strip().upper() for r in rule_ids]
    known = [r for r in dict.fromkeys(ids) if r in ALL]
    return known, [r for r in ids if r not in ALL]


def load(rule: str) -> ModuleType | SimpleNamespace:
    if rule in _MODULES:
        return importlib.import_module(f"{__name__}.{_MODULES[rule]}")
    from ddplint.runtime.probes import gpu_only

    return gpu_only.probe(rule)
