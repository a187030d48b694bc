"""Canonical qualified names of the torch APIs the rules talk about.

PyTorch exposes the same class under several module paths (the defining module
and one or more re-exports). Rules compare against one canonical spelling; the
semantic index canonicalises every resolved name through ``canonical()``.
"""

from __future__ import annotations

import re

DDP = "torch.nn.parallel.DistributedDataParallel"
FSDP = "torch.distributed.fsdp.FullyShardedDataParallel"
FULLY_SHARD = "torch.distributed.fsdp.fully_shard"
DATA_PARALLEL = "torch.nn.DataParallel"
DATALOADER = "torch.utils.data.DataLoader"
DISTRIBUTED_SAMPLER = "torch.utils.data.DistributedSampler"
GRAD_SCALER = "torch.amp.GradScaler"
INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
DESTROY_PROCESS_GROUP = "torch.distributed.destroy_process_group"
GET_RANK = "torch.distributed.get_rank"
TORCH_DEVICE = "torch.device"
SET_DEVICE = "torch.cuda.set_device"
TORCH_SAVE = "torch.save"
TORCH_LOAD = "torch.load"
SYNC_BN_CONVERT = "torch.nn.SyncBatchNorm.convert_sync_batchnorm"
# MinkowskiEngine's sparse-tensor SyncBatchNorm has the same class-method converter (DDP012).
ME_SYNC_BN_CONVERT = "MinkowskiEngine.MinkowskiSyncBatchNorm.convert_sync_batchnorm"
ACCELERATE_DDP_KWARGS = "accelerate.utils.DistributedDataParallelKwargs"

# Defining module (or older alias) -> the public spelling rules use.
_ALIASES = {
    "torch.nn.parallel.distributed.DistributedDataParallel": DDP,
    "torch.nn.parallel.data_parallel.DataParallel": DATA_PARALLEL,
    "torch.nn.parallel.DataParallel": DATA_PARALLEL,
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel": FSDP,
    "torch.distributed._composable.fsdp.fully_shard": FULLY_SHARD,
    "torch.distributed._composable.fsdp.fully_shard.fully_shard": FULLY_SHARD,
    "torch.distributed.fsdp.fully_shard.fully_shard": FULLY_SHARD,
    "torch.utils.data.dataloader.DataLoader": DATALOADER,
    "torch.utils.data.distributed.DistributedSampler": DISTRIBUTED_SAMPLER,
    "torch.cuda.amp.GradScaler": GRAD_SCALER,
    "torch.cuda.amp.grad_scaler.GradScaler": GRAD_SCALER,
    "torch.amp.grad_scaler.GradScaler": GRAD_SCALER,
    "torch.distributed.distributed_c10d.init_process_group": INIT_PROCESS_GROUP,
    "torch.distributed.distributed_c10d.destroy_process_group": DESTROY_PROCESS_GROUP,
    "torch.distributed.distributed_c10d.get_rank": GET_RANK,
    "torch.nn.modules.batchnorm.SyncBatchNorm.convert_sync_batchnorm": SYNC_BN_CONVERT,
    "MinkowskiEngine.MinkowskiNormalization.MinkowskiSyncBatchNorm.convert_sync_batchnorm": ME_SYNC_BN_CONVERT,
    "torch.nn.utils.clip_grad.clip_grad_norm_": "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_value_": "torch.nn.utils.clip_grad_value_",
    "torch.serialization.save": TORCH_SAVE,
    "torch.serialization.load": TORCH_LOAD,
    "accelerate.DistributedDataParallelKwargs": ACCELERATE_DDP_KWARGS,
    # torch >= 2.6 device-agnostic API
    "torch.accelerator.set_device_index": SET_DEVICE,
    "torch.accelerator.set_device_idx": SET_DEVICE,
    # Subclasses from well-known libraries that behave as the torch class does
    "mmcv.parallel.MMDistributedDataParallel": DDP,
    "mmcv.parallel.distributed.MMDistributedDataParallel": DDP,
    "mmengine.model.MMDistributedDataParallel": DDP,
    "mmengine.model.wrappers.MMDistributedDataParallel": DDP,
    "mmengine.model.wrappers.distributed.MMDistributedDataParallel": DDP,
    "monai.data.DataLoader": DATALOADER,
    "monai.data.dataloader.DataLoader": DATALOADER,
    # MONAI's sampler subclasses torch's (shuffle defaults to True; it adds even_divisible).
    "monai.data.DistributedSampler": DISTRIBUTED_SAMPLER,
    "monai.data.utils.DistributedSampler": DISTRIBUTED_SAMPLER,
    "torch_geometric.loader.DataLoader": DATALOADER,
    "torch_geometric.loader.dataloader.DataLoader": DATALOADER,
    "torch_geometric.data.DataLoader": DATALOADER,
    "accelerate.utils.dataclasses.DistributedDataParallelKwargs": ACCELERATE_DDP_KWARGS,
}


# In a module with ``from x import *``, conventional names that nothing binds
# there most likely come from the star import (``from utils import *`` where
# utils does ``import torch.distributed as dist``).
STAR_IMPORT_CONVENTIONS = {
    "torch": "torch", "os": "os", "dist": "torch.distributed", "nn": "torch.nn", "F": "torch.nn.functional",
    "mp": "torch.multiprocessing", "DDP": DDP, "DistributedDataParallel": DDP, "FSDP": FSDP,
    "DataLoader": DATALOADER, "DistributedSampler": DISTRIBUTED_SAMPLER,
}


def canonical(qualified_name: str) -> str:
    """Return the canonical spelling of a resolved dotted name."""
    return _ALIASES.get(qualified_name, qualified_name)


# Positional signatures of the calls whose arguments rules inspect, so that
# ``DataLoader(ds, 10, False, None, None, 4)`` finds ``num_workers`` at index 5.
SIGNATURES: dict[str, tuple[str, ...]] = {
    DATALOADER: (
        "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers",
        "collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn",
    ),
    DDP: (
        "module", "device_ids", "output_device", "dim", "broadcast_buffers",
        "process_group", "bucket_cap_mb", "find_unused_parameters",
    ),
    DATA_PARALLEL: ("module", "device_ids", "output_device", "dim"),
    DISTRIBUTED_SAMPLER: ("dataset", "num_replicas", "rank", "shuffle", "seed", "drop_last"),
    TORCH_DEVICE: ("type", "index"),
    SET_DEVICE: ("device",),
    TORCH_SAVE: ("obj", "f"),
    TORCH_LOAD: ("f", "map_location"),
    "torch.hub.load_state_dict_from_url": ("url", "model_dir", "map_location"),
    ACCELERATE_DDP_KWARGS: ("dim", "broadcast_buffers", "bucket_cap_mb", "find_unused_parameters"),
}


# ---------------------------------------------------------------------- ranks
# Shared by the screen (ast) and the judge (libcst): see ddplint.analysis.ranks.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK",
                  "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "NODE_RANK", "GROUP_RANK")
# The LOCAL_RANK variable named in a string (``os.environ["LOCAL_RANK"]``, a message about
# it), not a longer variable that ends in it (``OMPI_COMM_WORLD_LOCAL_RANK``: torchrun does not
# set it) nor an attribute (``config.LOCAL_RANK``: no string).
LOCAL_RANK_VARIABLE = re.compile(r"(?<![A-Za-z0-9_])LOCAL_RANK(?![A-Za-z0-9_])")
# Last component of a name or attribute holding a rank: rank, local_rank, ddp_rank, ...
# (not ``num_tokens_per_dp_rank``: a config quantity that merely ends in "rank").
# The last part of a name that counts nodes: ``args.node_rank * ngpus + gpu`` is a global rank.
NODE_WORDS = ("node_rank", "noderank", "nr", "node_id", "node_idx", "machine_rank", "node")
RANK_NAME = re.compile(
    r"^_*((local|global|world|node|ddp|dp|tp|pp|cp|ep|gpu|my|proc|process|machine|cur|current|"
    r"trainer|worker|data_parallel|device)_?)?rank$|^(local_)?process_index$|^rank_id$", re.IGNORECASE)
# Predicates that are true on the main process only.
RANK_PREDICATES = frozenset({
    "is_main_process", "is_local_main_process", "is_master", "is_local_master", "is_master_process",
    "is_rank_zero", "is_rank_0", "is_global_zero", "is_local_zero", "is_main_rank", "is_primary",
    "is_main_worker", "is_chief", "is_leader", "main_process", "is_main",
    # Hugging Face Trainer / TrainingArguments, torch_xla
    "is_world_process_zero", "is_local_process_zero", "is_master_ordinal",
})
# Predicates named like ``is_first_worker()``, ``is_master_node()``, ``is_chief_process()``
# (imported helpers whose body ddplint may not see): ``is_`` + a "main" word + process words.
# Not ``is_first_epoch`` / ``is_main_thread``: the suffix must name a process.
RANK_PREDICATE_NAME = re.compile(
    r"^_*is_(?:(?:main|master|chief|leader|primary|rank_?0|rank_?zero)(?:_(?:{w}))*|first(?:_(?:{w}))+)$"
    .format(w="worker|process|proc|rank|node|host|gpu|device|replica|machine|local|global|zero|card"))


def is_rank_predicate_name(name: str) -> bool:
    """``is_main_process``, ``is_first_worker``, ...: a predicate true on the main process only."""
    return name in RANK_PREDICATES or RANK_PREDICATE_NAME.match(name) is not None


# Decorators that make a function run on rank 0 only (Lightning, mmcv, ...).
RANK_ZERO_DECORATORS = ("rank_zero_only", "master_only", "main_process_only", "on_main_process",
                        "on_local_main_process", "rank_zero", "only_rank_zero", "is_main_process")


def is_test_module(path: str) -> bool:
    """Unit tests pin devices and ranks on purpose (and never run multi-node):
    ``test_*.py``, ``*_test.py``, ``conftest.py`` or anything under ``tests/``."""
    parts = path.replace("\\", "/").split("/")
    name = parts[-1]
    return (name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
            or any(part in ("tests", "test", "unit_tests") for part in parts[:-1]))
