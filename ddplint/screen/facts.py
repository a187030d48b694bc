"""Stage 1, the screen: a small summary of every module of the project, from
CPython's ``ast``.

Real DDP code spreads one job over several modules (the model is wrapped in
main.py, the loop lives in engine.py, the sampler is built in data.py). So,
before the per-file judge, the engine summarises every file of the project into
a small, picklable ``ModuleFacts`` (``summarize``) and joins them into a
``Project`` (``ddplint.screen.project``).

The summaries are extracted with Python's ``ast`` (about seven times cheaper than
the libcst parse the judge needs), never retain a tree, depend only on the
file's text (so they can be cached by content hash), and are tiny: names, flags
and call records.
"""

from __future__ import annotations

import ast
import builtins
import re
import sys
import dataclasses
from dataclasses import dataclass, field
from typing import Iterable, Optional

from ddplint import names
from ddplint.names import RANK_NAME, RANK_ZERO_DECORATORS
from ddplint.screen.walk import dotted as _dotted
from ddplint.screen.walk import Subtrees
from ddplint.screen.walk import iter_child_nodes as _iter_child_nodes
from ddplint.screen.walk import walk as _walk

COLLECTIVES = frozenset(
    f"torch.distributed.{name}" for name in (
        "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "broadcast",
        "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor", "barrier",
        "scatter", "scatter_object_list", "gather", "gather_object", "all_to_all",
        "all_to_all_single", "monitored_barrier", "all_reduce_coalesced", "all_gather_coalesced",
    )
)
COLLECTIVE_STATE_DICT = frozenset({
    names.FSDP + ".full_optim_state_dict", names.FSDP + ".optim_state_dict",
    names.FSDP + ".sharded_optim_state_dict", names.FSDP + ".scatter_full_optim_state_dict",
    "torch.distributed.checkpoint.state_dict.get_model_state_dict",
    "torch.distributed.checkpoint.state_dict.get_optimizer_state_dict",
    "torch.distributed.checkpoint.state_dict.get_state_dict",
    "torch.distributed.checkpoint.state_dict.set_model_state_dict",
    "torch.distributed.checkpoint.save", "torch.distributed.checkpoint.load",
    "torch.distributed.checkpoint.save_state_dict", "torch.distributed.checkpoint.load_state_dict",
    "torch.distributed.checkpoint.state_dict_saver.save",
    "torch.distributed.checkpoint.state_dict_loader.load",
})
SHARDING_FRAMEWORKS = ("accelerate", "lightning", "pytorch_lightning", "deepspeed", "ray", "horovod",
                       "composer", "torchdata", "webdataset", "ffcv")
# Calls of these are never project functions (shared with analysis.models).
LIBRARY_PREFIXES = ("torch.", "os.", "sys.", "numpy.")
_SPAWNERS = ("spawn", "start_processes", "Process", "launch", "elastic_launch", "run")
# A ``CallFact.maybe_guards`` entry for an attribute tested by an enclosing ``if``
# (``if args.should_save:``): a guard when it is a rank flag of the project.
FLAG_PREFIX = "flag:"
_PROCESS_INDEX_NAMES = ("gpu", "gpu_id", "device_id", "proc_id", "process_id", "local_gpu", "dev_id", "gpu_index",
                        "gpu_idx")
# What a call passes in an argument slot (CallFact.args), as far as the screen can
# tell; ``Project.param_values`` joins them over every call site of a function.
DDP_MODEL, FSDP_MODEL = "ddp", "fsdp"
GLOBAL_RANK = "global_rank"  # dist.get_rank(), RANK, SLURM_PROCID, ...
LOCAL_RANK = "local_rank"  # LOCAL_RANK, SLURM_LOCALID, rank % torch.cuda.device_count()
ARGV_LOCAL_RANK = "argv_local_rank"  # args.local_rank where the script adds --local_rank
CUDA_DEVICE = "cuda_device"  # torch.device("cuda"), "cuda": a CUDA device without an index
SPAWN_INDEX = "spawn_index"  # the process index mp.spawn passes as the first argument
LITERAL = "literal"  # an integer constant
TRUE = "true"  # the constant True (``data_sampler(ds, shuffle=True)``)
RANK_FLAG = "rank_flag"  # a rank test's outcome (``train(..., verbose=dist.get_rank() == 0)``)
UNKNOWN = "unknown"  # anything else (in Project.param_values only)
PARAM_PREFIX = "param:"  # "param:NAME": the caller's own parameter NAME, passed on
STRING_PREFIX = "str:"  # "str:train": a short word-like string constant (a mode name)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,39}$")
LOCAL_RANK_ATTRIBUTE = "attr:local_rank"  # X.local_rank: ARGV_LOCAL_RANK once the join knows
# "ret:CALLEE:ITEM": what a project function returns (ITEM "" for the value, "0",
# "1", ... for a tuple's items: ``g, d = setup(g, d)``); the join reads the
# callee's returns_wrapped (a model wrapped by a setup helper, passed on).
# Several bindings give several such tags joined by "|".
RETURN_PREFIX = "ret:"
# The callee of ``obj.m()`` with ``obj = factory(...)``: "factory().m" (see FunctionFacts.returns_classes).
FACTORY_CALL = "()."
# The callee of ``fn = REGISTRY[name]`` then ``fn(...)``: "REGISTRY[]", every function
# registered there (``@REGISTRY.register_module``; ModuleFacts.registered).
REGISTRY_CALL = "[]"
# "self:Cls.NAME": ``self.NAME`` of class Cls, stored from a parameter of one of
# its methods (ModuleFacts.attribute_params): what its callers passed there.
SELF_ATTRIBUTE_PREFIX = "self:"
# "set:ATTR:CALLEE@SLOT|...": ``args.ATTR`` of a name this function handed to those calls
# before (``init_distributed_mode(args)`` then ``rank = args.rank``); the join reads the
# callees' sets_param_ranks (Project._set_by_callee_tag).
SET_BY_CALLEE_PREFIX = "set:"

_GLOBAL_RANK_VARIABLES = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
_LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                         "MV2_COMM_WORLD_LOCAL_RANK", "PMI_LOCAL_RANK")
_ENVIRON_GETTERS = ("os.environ.get", "os.getenv")
# Collectives after which every rank holds the same value in their first argument.
_AGREEING_COLLECTIVES = frozenset(f"torch.distributed.{name}" for name in (
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "broadcast_object_list"))

# Part of every facts cache key: change it whenever the summaries below change
# shape or meaning, so that no cache serves facts of an older layout.
FACTS_VERSION = "114"  # bumped on every change of the summaries (history in git log)
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK",
                   "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "NODE_RANK")



# ---------------------------------------------------------------------- summaries
def _has_training_loop(function: ast.AST) -> bool:
    """Does the function itself (not a nested one) run a training loop: a loop
    over epochs, or one that calls ``backward()`` / ``step()``?"""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            head = _text_of(node.target) + _text_of(node.iter) if not isinstance(node, ast.While) else ""
            if "epoch" in head.lower() or any(
                    isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("backward", "step")
                    for n in ast.walk(node)):
                return True
        stack.extend(ast.iter_child_nodes(node))
    return False


_REGISTERING = ("register", "register_module", "register_function")


def _registries(decorators: list[ast.AST]) -> list[str]:
    """The registries a function's decorators add it to: "REG" for ``@REG.register_module``,
    ``@REG.register_module()`` and ``@REG.register("name")``."""
    found = []
    for decorator in decorators:
        func = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(func, ast.Attribute) and func.attr in _REGISTERING:
            registry = _dotted(func.value)
            if registry is not None:
                found.append(registry)
    return found


def _steps_an_optimizer(function: ast.AST) -> bool:
    """Does the function itself step an optimizer once per call: ``opt.step()`` on a
    name that says optimizer, or ``scaler.step(opt)``, outside any loop of its own?"""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
                             ast.For, ast.AsyncFor, ast.While)):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step":
            holder = (_dotted(node.func.value) or "").lower().rsplit(".", 1)[-1]
            if "optim" in holder or holder in ("opt", "optim") or holder.startswith("opt_") \
                    or holder.endswith("_opt") or ("scaler" in holder and node.args):
                return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def _params_defaulting_to(args: ast.arguments, constant: object) -> set[str]:
    """The parameters whose default is the constant ``None`` / ``True`` (compared by identity)."""
    positional = [*args.posonlyargs, *args.args]
    found = {a.arg for a, d in zip(positional[len(positional) - len(args.defaults):], args.defaults)
             if isinstance(d, ast.Constant) and d.value is constant}
    found |= {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults)
              if isinstance(d, ast.Constant) and d.value is constant}
    return found


def _disables_grad(expr: ast.AST) -> bool:
    """``torch.no_grad()``, ``torch.inference_mode()`` (call or decorator),
    ``torch.set_grad_enabled(False)``."""
    callee = expr.func if isinstance(expr, ast.Call) else expr
    last = (_dotted(callee) or "").rsplit(".", 1)[-1]
    if last in ("no_grad", "inference_mode"):
        return True
    return last == "set_grad_enabled" and isinstance(expr, ast.Call) and bool(expr.args) \
        and isinstance(expr.args[0], ast.Constant) and expr.args[0].value is False


@dataclass(slots=True)
class CallFact:
    """A call (or a ``mp.spawn(fn)`` reference) that may reach a project function."""

    # dotted, as written ("train", "engine.train"), or for a call through an
    # instance the class as written and the method ("Trainer.fit", "eng.Loop.run",
    # "Net.__call__"; ``instance`` is then True)
    callee: str
    caller: str  # the enclosing function's key ("train", "Trainer.fit"), "" at module level
    guarded: bool  # under a rank condition (strict)
    guarded_lenient: bool  # ... or under a process-index test (``args.gpu == 0``)
    # argument slot (position as str, or keyword) -> "ddp" / "fsdp" / "param:NAME"
    args: dict[str, str] = field(default_factory=dict)
    # imported helpers called in enclosing ``if`` tests: a guard when one of them
    # turns out (at the join) to be a rank predicate defined in another module
    maybe_guards: tuple[str, ...] = ()
    # a bound call: ``self.m()``, ``obj.m()``, ``obj()``, ``Cls().m()`` (the first
    # parameter, ``self``, is not an argument slot)
    instance: bool = False
    # inside ``with torch.no_grad():`` / ``inference_mode()`` (or a function decorated with them)
    no_grad: bool = False
    # what the call fills: the number of positional arguments and the keywords;
    # None with ``*args`` / ``**kwargs`` (it may fill any parameter)
    positional: Optional[int] = 0
    keywords: tuple[str, ...] = ()
    # in the arm of a test that only a single-process run takes (``if args.local_rank == -1:``,
    # ``else`` of ``if args.distributed:``): the call runs in no DDP worker
    single_process: bool = False
    # parameters of the enclosing function the call needs true: it sits in the body of ``if
    # reduce:`` / ``if flag and x:`` or of ``f(x) if reduce else y`` (Project: a collective
    # the caller switches off with ``reduce=False``)
    needs_flags: tuple[str, ...] = ()
    # argument slots (position as str, or keyword) given the constant False or None
    false_slots: tuple[str, ...] = ()


@dataclass(slots=True)
class FunctionFacts:
    name: str  # the key in ModuleFacts.functions: "train", or "Trainer.fit" for a method
    params: tuple[str, ...]
    collective: bool = False  # issues a collective / collective state-dict call itself
    # ... or only under flags, one of which must be true: its parameters (``if reduce:``) or
    # attributes its class stores from a constructor parameter ("self.dist" for ``if self.dist:``
    # with ``self.dist = dist`` in ``__init__``); Project._propagate_collectives
    collective_flags: tuple[str, ...] = ()
    forwards: set[str] = field(default_factory=set)  # params called as ``param(...)``
    forwards_globals: set[str] = field(default_factory=set)  # module-level DDP models called (``model(...)``)
    # Instance attributes called in a method (``self.net(x)``; not the class's own methods): a
    # forward of a wrapped model when the class stores one there (Project.attribute_forwards).
    forwards_attributes: set[str] = field(default_factory=set)
    loads: set[str] = field(default_factory=set)  # params whose load_state_dict is called
    rank_predicate: bool = False  # every return value is a rank test
    # ... or a process-index test (``return torch.device(self.device) == torch.device("cuda:0")``)
    rank_predicate_lenient: bool = False
    # Params whose default is the constant True: a call that leaves them out passes True
    # (``mk_loaders(ds, shuffle: bool = True)`` called without it; Project.param_values).
    true_defaults: set[str] = field(default_factory=set)
    # Params whose default is the constant False or None: a call that leaves them out switches
    # off what needs them (CallFact.needs_flags).
    false_defaults: set[str] = field(default_factory=set)
    rank_zero_only: bool = False  # decorated with @rank_zero_only / @master_only
    calls_set_epoch: bool = False
    device_params: set[str] = field(default_factory=set)  # params used as a CUDA device / device index
    sets_device: bool = False  # calls torch.cuda.set_device (a worker's set-up helper: ``set_dist(args)``)
    inits_process_group: bool = False  # calls init_process_group itself (a set-up helper)
    # Every return hands back a value that a collective made the same on every
    # rank (``t = x.clone(); dist.all_reduce(t); return t``).
    returns_agreed: bool = False
    # Params whose tensor every return hands back, itself or a copy that keeps its
    # autograd history (``rt = t.clone(); dist.all_reduce(rt); return rt``): the
    # call's result carries the graph of that argument (DDP001).
    returns_params: set[str] = field(default_factory=set)
    # Training-loop facts (ddplint.analysis.flow): runs ``x.backward()`` itself;
    # parameters it stores in the instance (``self.sum += val``); what it returns
    # wrapped in DDP/FSDP ("" for the value itself, "0", "1", ... for a tuple's items).
    runs_backward: bool = False
    # Steps an optimizer (``self.optimizer.step()``, ``scaler.step(opt)``) once per call: outside
    # any loop of its own (``def _optimizer_step(self): clip...; self.optimizer.step()``).
    steps_optimizer: bool = False
    keeps: set[str] = field(default_factory=set)
    returns_wrapped: dict[str, str] = field(default_factory=dict)
    # Return positions ("" or "0", "1", ...) that hand back what a possible project function
    # returned (``model = set_model(m); return tokenizer, model``): position -> RETURN_PREFIX tag,
    # resolved at the join (Project.returned_tag).
    returns_through: dict[str, str] = field(default_factory=dict)
    # A factory: every return hands back an instance of a class named in this module
    # (``return YoloTrainer(args)`` / ``return YoloxTrainer(args)``): those classes, as
    # written. ``trainer = build_trainer(...); trainer.train(model)`` may run either's method.
    returns_classes: tuple[str, ...] = ()
    # the classes themselves (not instances) that every return names: ``return DatasetDDP``
    returns_class_objects: tuple[str, ...] = ()
    # What the returns hand back as a rank ("" for the value, "0", "1", ... for a tuple's
    # items) -> GLOBAL_RANK / LOCAL_RANK, when every return gives that rank or an integer
    # constant there (``return 0, 1, dev`` ... ``return int(os.environ["RANK"]), world, dev``).
    returns_ranks: dict[str, str] = field(default_factory=dict)
    # Attributes of parameters the function sets from a rank ("args.rank" -> GLOBAL_RANK for
    # ``def dist_setup_launch(args): args.rank = int(os.environ["RANK"])``), when every
    # assignment there gives that rank or an integer constant: a caller that hands its
    # object over reads the rank back in ``args.rank`` (values.rank_sources).
    sets_param_ranks: dict[str, str] = field(default_factory=dict)
    # Params annotated with the wrapper class (``def __init__(self, model: FSDP)``) -> "ddp"/"fsdp":
    # the author says what callers pass (seeds Project.ddp_params).
    annotated_wrapped: dict[str, str] = field(default_factory=dict)
    # Tuple items ("0", "1", ...) every return hands back without autograd history
    # (``return loss, torch.cat(parts).detach()``): unpacking them gives no graph (DDP001).
    returns_detached: set[str] = field(default_factory=set)
    # Params whose value ``torch.save`` writes (the whole object, or a value of
    # the dict / list saved; "*" for ``torch.save(*args)``): a save helper.
    saves: set[str] = field(default_factory=set)
    # Params that choose what an unguarded ``torch.save`` writes or where (the
    # object as above, or the file: ``torch.save(state, checkpoint_path)``).
    saves_unguarded: set[str] = field(default_factory=set)
    saves_state: bool = False  # an unguarded torch.save writes model state built here
    # Runs a training loop itself (a loop over epochs, or one calling backward() / step()):
    # its saves are its own, not a save helper's (DDP011).
    trains: Optional[bool] = None  # worked out for every function (None only in a summary being built)
    # Params every unguarded save needs passed: each such save sits under ``if model is not None:``
    # (or ``if model:``) of a parameter whose default is None (``lm_checkpoint(cfg, model=None)``
    # saves when given a model and loads otherwise); empty when some save needs none.
    saves_need: tuple[str, ...] = ()
    # Saves that would be unguarded but sit in the body of ``if obj.flag:`` (or
    # ``if obj.flag and ...:``): (the flags' attribute names, the params as in
    # ``saves_unguarded``, saves_state). The join counts them as unguarded unless
    # one flag is a rank flag of the project (``Project.is_rank_flag_attribute``).
    saves_flagged: list = field(default_factory=list)
    # Params handed to a method of an object of unknown class whose name says it
    # evaluates or runs (``pipeline.run(dir, model=model)``): where they go is not visible.
    hands_on: set[str] = field(default_factory=set)
    # A loader builder (``def get_loader(ds, bs, dist=False): sampler =
    # DistributedSampler(ds) if dist else None; return DataLoader(ds, sampler=sampler)``):
    # the parameter, False or None by default, without which the returned loader has no sampler.
    sampler_switch: str = ""
    # A method that changes its own module's parameters (DDP024 when it runs on a
    # DDP model's ``.module`` after the wrap): "new" when it assigns a new torch.nn
    # module or Parameter to ``self.x`` / ``self.a.b`` (also through a local name),
    # "freeze" when it sets ``requires_grad = False`` over ``self....parameters()``
    # or calls ``self....requires_grad_(False)``; "" otherwise.
    reshapes_self: str = ""


@dataclass(slots=True)
class ModuleFacts:
    path: str
    imports: dict[str, str] = field(default_factory=dict)  # local name -> target ("..pkg.mod.f")
    star_imports: list[str] = field(default_factory=list)  # modules of ``from M import *``
    # Modules imported by name at run time: ``import_module(f"pkg.trainers.{name}_trainer")``
    # as "pkg.trainers.*_trainer" ("*" stands for a formatted part, within one dotted part).
    dynamic_imports: list[str] = field(default_factory=list)
    own_ddp_context: bool = False
    functions: dict[str, FunctionFacts] = field(default_factory=dict)  # "f" / "Cls.method" -> facts
    classes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # "Cls" / "Outer.Inner" -> bases
    calls: list[CallFact] = field(default_factory=list)
    calls_set_epoch: bool = False
    destroys_process_group: bool = False  # at module level (or in a function, before FACTS_VERSION 22)
    # Functions ("cleanup", "Trainer.close") that call destroy_process_group: a destroy only
    # when something may run them (``Project.may_run``).
    destroy_functions: list[str] = field(default_factory=list)
    # The last names of every callee and of every function handed to a call
    # (``atexit.register(cleanup)``, ``Process(target=run)``) in the module.
    call_names: set[str] = field(default_factory=set)
    calls_set_device: bool = False
    # When every ``set_device`` call of the module sits in a plain function that the
    # module never hands on as a value nor decorates (``def init_distributed_mode(args)``):
    # those functions. The call runs only if some module calls or imports one of them.
    set_device_only_in: tuple[str, ...] = ()
    # ``os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)``: each process sees one GPU
    masks_visible_devices: bool = False
    has_epoch_loop: bool = False
    reads_local_rank_env: bool = False
    local_rank_attr_as_device: bool = False
    adds_local_rank_flag: bool = False  # argparse ``add_argument("--local_rank")``
    uses_sharding_framework: bool = False  # accelerate / Lightning shard loaders themselves
    # wraps a model in DDP / FSDP / fully_shard itself
    wraps_models: bool = False
    # all-reduces gradients by hand (``dist.all_reduce(p.grad)``): with no wrap anywhere in the
    # project, its backward loops are no DDP training loops (DDP014)
    reduces_gradients: bool = False
    # imports torch.distributed and reads a name of that import (an unused import runs no worker)
    uses_torch_distributed: bool = False
    moves_to_cuda: bool = False  # puts data on a GPU: .cuda(), "cuda"/"cuda:N"/"nccl", set_device, device_ids=
    wrapped_globals: dict[str, str] = field(default_factory=dict)  # module-level name -> "ddp"/"fsdp"
    # "Cls" -> {"model": "ddp"} for ``self.model = DDP(...)`` in the class's methods
    wrapped_attributes: dict[str, dict[str, str]] = field(default_factory=dict)
    # "Cls" -> {"dis": ("__init__", "Dis")} for ``self.dis = Dis`` with ``Dis`` a
    # parameter of the method: the attribute holds what callers pass there.
    attribute_params: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)
    # "Cls" -> {"model": "ret:prepare_dp_model:"} for ``self.model = prepare_dp_model(...)`` with
    # a possible project function: wrapped when its returns are (Project.attribute_wrapped).
    attribute_returns: dict[str, dict[str, str]] = field(default_factory=dict)
    # "Cls.method" for ``super().method(...)`` (or ``super(Cls, self).method``)
    # called in a method of class Cls: the base class's method runs there too.
    super_calls: list[str] = field(default_factory=list)
    # Module-level functions registered in a registry object: the registry as written
    # ("PIPELINE_DICT") -> their names, for ``@PIPELINE_DICT.register_module`` (also
    # ``register_module()``, ``register(...)``). ``PIPELINE_DICT[cfg.name](...)`` may run any.
    registered: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # A shell launcher (``run.sh``): the Python scripts it runs with one GPU visible per
    # process (``export CUDA_VISIBLE_DEVICES=$1`` then ``python models/train.py``), as written.
    launches_masked: tuple[str, ...] = ()
    # ... the Python scripts it runs through a wrapper script (``mpiexec ... ./set_affinity.sh
    # python3 main.py``): (the wrapper as written, the script); and, for a wrapper, whether it
    # sets one visible GPU and then runs its arguments (``export CUDA_VISIBLE_DEVICES=$gpu``
    # ... ``exec "$@"``): Project.masked_by_launcher joins the two.
    launches_through: tuple[tuple[str, str], ...] = ()
    masks_its_command: bool = False
    # Classes whose methods read both ``dist.get_rank()`` and ``dist.get_world_size()``:
    # a data class that keeps its rank's slice itself (DDP009's hand sharding).
    rank_sharding_classes: set[str] = field(default_factory=set)
    # Code that strips the 'module.' prefix of a loaded state dict (see ``prefix_strips``).
    prefix_strips: list["PrefixStrip"] = field(default_factory=list)
    # This module's decorators that call what they wrap under a rank test only
    # (``rank_gate_decorators``): what they decorate runs on that rank, as with @rank_zero_only.
    rank_gates: tuple[str, ...] = ()
    # The literal text of ``torch.save`` paths ("./cache/{}_{}.pt": "{}" for a placeholder).
    saved_paths: list[str] = field(default_factory=list)
    # ... those whose saved object is known to hold CPU tensors (``net.cpu()`` then
    # ``torch.save(net.state_dict(), p)``, ``{k: v.cpu() ...}``): a load of the file elsewhere
    # needs no map_location (DDP019).
    cpu_saved_paths: list[str] = field(default_factory=list)
    # Attribute name -> whether every ``obj.name = ...`` of this module stores a rank
    # flag: a rank test (``args.should_save = args.save and is_master(args)``) or a
    # boolean literal under a rank guard (``if rank % n == 0: opt.log = True``).
    attribute_flags: dict[str, bool] = field(default_factory=dict)
    # Attribute names this module sets to an empty value (None, False, "", 0) in an arm
    # of a rank test that rank 0 never takes (``if rank != 0: cfg.ckpt_dir = None``):
    # ``if cfg.ckpt_dir is not None:`` / ``if self.verbose:`` then lets rank 0 through.
    nulled_off_main: set[str] = field(default_factory=set)
    # ... of those, the ones set to False there (``if dist.get_rank() != self.main_gpu:
    # self.save_models = False``): a boolean switch only the main rank keeps on, so
    # ``if self.save_models:`` is a rank condition (Project.is_switched_off_main).
    switched_off_main: set[str] = field(default_factory=set)
    # Class names (the module's classes, imported names) used otherwise than called
    # or subclassed: read as a value (``REGISTRY = {"t": Trainer}``, ``build(Trainer)``)
    # or a decorated class of the module (a registry's ``@register``). Such a class
    # may be built where no call names it (roles.in_unbuilt_single_process_class).
    class_values: frozenset = frozenset()
    # The rules' screens on this module (ddplint.screen.screening.Verdict); None
    # when the judge must decide alone.
    screen: Optional[tuple] = None


LAUNCHER_SUFFIX = ".sh"
_MASK = re.compile(r"^(?:export\s+)?CUDA_VISIBLE_DEVICES=(\S*)$")
_PYTHON = re.compile(r"^python(\d(\.\d+)?)?$")


def summarize_launcher(source: str, path: str) -> ModuleFacts:
    """The facts of a shell launcher: which Python scripts it runs with one GPU
    visible per process (ModuleFacts.launches_masked). Not a Python module: it
    imports, calls and defines nothing."""
    facts = ModuleFacts(path)
    facts.launches_masked = tuple(_masked_launches(source))
    facts.launches_through = tuple(_launches_through(source))
    facts.masks_its_command = _masks_its_command(source)
    return facts


def _shell_lines(source: str) -> list[list[str]]:
    return [line.split("#", 1)[0].split() for line in source.replace("\\\n", " ").splitlines()]


def _launches_through(source: str) -> list[tuple[str, str]]:
    """``mpiexec -n $N ./set_affinity_gpu.sh python3 main.py``: (wrapper, script) pairs."""
    found = []
    for words in _shell_lines(source):
        for position, word in enumerate(words):
            if word.endswith(LAUNCHER_SUFFIX):
                script = _python_script(words[position + 1:])
                if script is not None:
                    found.append((word, script))
                break
    return found


def _leading_mask(words: list[str]) -> Optional["re.Match[str]"]:
    """``CUDA_VISIBLE_DEVICES=X`` / ``export CUDA_VISIBLE_DEVICES=X`` at the start of a line's words."""
    if not words:
        return None
    return _MASK.match(" ".join(words[:2]) if words[0] == "export" else words[0])


def _masks_its_command(source: str) -> bool:
    """A wrapper that makes one GPU visible and then runs the command it is given."""
    lines = _shell_lines(source)
    masks = any((mask := _leading_mask(words)) is not None and _one_device(mask.group(1)) for words in lines)
    runs = any(words and words[-1].strip("\"'") == "$@" and words[0] in ("exec", '"$@"', "$@")
               for words in lines)
    return masks and runs


def _masked_launches(source: str) -> list[str]:
    """``export CUDA_VISIBLE_DEVICES=$1`` (or ``CUDA_VISIBLE_DEVICES=$i python ...``)
    with one device (a variable or a number, no list), then ``python [flags] x.py``
    (not ``python -m``: torchrun and friends start several processes). A literal
    device counts only when the file starts the script on two or more of them
    (``CUDA_VISIBLE_DEVICES=0 python t.py & CUDA_VISIBLE_DEVICES=1 python t.py``):
    ``export CUDA_VISIBLE_DEVICES=0`` then ``python run.py`` is a one-GPU run of
    the script's single-process path, and says nothing of how torchrun starts it
    (a54 OpenLTM's forecast scripts)."""
    found, masked = [], None
    literals: dict[str, set[str]] = {}
    for words in _shell_lines(source):
        while words and words[0] in ("srun", "exec", "nohup", "time", "singularity"):
            words = words[1:]
        prefix_mask = None
        while (mask := _leading_mask(words)) is not None:
            value = mask.group(1).strip("\"'") if _one_device(mask.group(1)) else None
            words = words[2:] if words[0] == "export" else words[1:]
            if words:
                prefix_mask = value or ""
            else:
                masked = value
        script = _python_script(words)
        value = prefix_mask if prefix_mask is not None else masked
        if script is None or not value:
            continue
        if value.isdigit():
            literals.setdefault(script, set()).add(value)
        elif script not in found:
            found.append(script)
    found += [script for script, values in literals.items() if len(values) > 1 and script not in found]
    return found


def _one_device(value: str) -> bool:
    value = value.strip("\"'")
    return bool(value) and "," not in value and (value.isdigit() or value.startswith("$"))


def _python_script(words: list[str]) -> Optional[str]:
    if not words or not _PYTHON.match(words[0].rsplit("/", 1)[-1]):
        return None
    for word in words[1:]:
        if word == "-m":
            return None
        if word.endswith(".py"):
            return word
        if not word.startswith("-"):
            return None
    return None


def summarize(source: str, path: str, screen: bool = True) -> Optional[ModuleFacts]:
    """The module's facts (with the rules' screen verdict), or None when Python
    cannot parse it."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    facts = ModuleFacts(path)
    try:
        subtrees = Subtrees(tree)
        extractor = _Extractor(facts, "local_rank" in source, subtrees)
        if "rank" in source and "@" in source:
            extractor.rank_gates = facts.rank_gates = rank_gate_decorators(tree)
        extractor.module(tree)
        if facts.calls_set_device and not extractor.module_sets_device:
            facts.set_device_only_in = _plain_device_setters(tree, facts, subtrees)
        if screen:
            from ddplint.screen.screening import screen_tree

            facts.screen = screen_tree(tree, source, subtrees.order, path)
    except RecursionError:
        return None
    _record_hand_ons(facts)
    facts.calls = [call for call in facts.calls if _may_reach_project_function(call, facts)]
    facts.reads_local_rank_env = "LOCAL_RANK" in source and _names_local_rank_variable(tree)
    facts.moves_to_cuda = _CUDA_USE.search(source) is not None
    facts.masks_visible_devices = "CUDA_VISIBLE_DEVICES" in source and _masks_visible_devices(tree, subtrees)
    if facts.classes or facts.imports:
        facts.class_values = _class_values(facts, subtrees)
    if any(marker in source for marker in _STRIP_MARKERS):
        facts.prefix_strips = prefix_strips(tree, facts, subtrees)
    facts.uses_sharding_framework = _reads_an_import(
        facts, subtrees, lambda target: target.lstrip(".").split(".")[0] in SHARDING_FRAMEWORKS)
    facts.uses_torch_distributed = _reads_an_import(
        facts, subtrees, lambda target: target == "torch.distributed" or target.startswith("torch.distributed."))
    return compact(facts)


def _reads_an_import(facts: ModuleFacts, subtrees: Subtrees, wanted) -> bool:
    """A module whose import target ``wanted`` accepts is imported and a name of that import
    read (an unused ``from accelerate import Accelerator`` shards nothing, an unused ``import
    torch.distributed as dist`` starts no worker; ``values.uses_imported_module``)."""
    bound = {local.split(".")[0] for local, target in facts.imports.items() if wanted(target)}
    return bool(bound) and any(type(node) is ast.Name and node.id in bound and type(node.ctx) is ast.Load
                               for node in subtrees.order)


# ---------------------------------------------------------------------- compact summaries
class _EmptySet(frozenset):
    """The one empty set of every summary (pickled by reference: unpickling
    does not make a new one per field)."""

    __slots__ = ()

    def __reduce__(self):
        return "EMPTY_SET"


class _EmptyMap(dict):
    """The one empty mapping of every summary; summaries are read-only once made."""

    __slots__ = ()

    def __reduce__(self):
        return "EMPTY_MAP"

    def _read_only(self, *args, **kwargs):
        raise TypeError("summaries are read-only")

    __setitem__ = __delitem__ = setdefault = update = pop = popitem = clear = _read_only  # type: ignore


EMPTY_SET = _EmptySet()
EMPTY_MAP = _EmptyMap()
_FUNCTION_SETS = ("forwards", "true_defaults", "false_defaults", "forwards_globals", "forwards_attributes",
                  "loads", "device_params", "keeps", "saves", "saves_unguarded", "returns_detached",
                  "hands_on")
_MODULE_MAPS = ("imports", "functions", "classes", "wrapped_globals", "wrapped_attributes", "attribute_params",
                "attribute_returns", "attribute_flags", "registered")


def intern_strings(facts: "ModuleFacts") -> None:
    """Share the names that every module repeats ("self", "forward", "model",
    callers' keys) once summaries from many processes are joined in one."""
    intern = sys.intern
    facts.path = intern(facts.path)
    functions = {}
    for key, function in facts.functions.items():
        function.name = intern(function.name)
        function.params = tuple(intern(p) for p in function.params)
        functions[function.name if function.name == key else intern(key)] = function
    if functions:
        facts.functions = functions
    for call in facts.calls:
        call.callee, call.caller = intern(call.callee), intern(call.caller)
        if call.args:
            call.args = {intern(k): intern(v) for k, v in call.args.items()}
    if facts.imports:
        facts.imports = {intern(k): intern(v) for k, v in facts.imports.items()}
    if facts.call_names:
        facts.call_names = frozenset(intern(name) for name in facts.call_names)


def compact(facts: "ModuleFacts") -> "ModuleFacts":
    """Share the empty containers: a project of thousands of modules holds
    tens of thousands of functions whose sets are nearly all empty (an empty
    set costs 216 bytes), in every process that holds the project."""
    wrapped = facts.wrapped_globals.keys()
    for function in facts.functions.values():
        # Only module-level DDP/FSDP models matter here (Project.call_reaches):
        # not every global a function calls (print, helpers).
        function.forwards_globals = function.forwards_globals & wrapped
        for name in _FUNCTION_SETS:
            if not getattr(function, name):
                setattr(function, name, EMPTY_SET)
        if not function.returns_wrapped:
            function.returns_wrapped = EMPTY_MAP
        if not function.returns_through:
            function.returns_through = EMPTY_MAP
        if not function.saves_flagged:
            function.saves_flagged = ()  # type: ignore[assignment]
    for call in facts.calls:
        if not call.args:
            call.args = EMPTY_MAP
    for name in _MODULE_MAPS:
        if not getattr(facts, name):
            setattr(facts, name, EMPTY_MAP)
    if not facts.star_imports:
        facts.star_imports = ()  # type: ignore[assignment]
    if not facts.dynamic_imports:
        facts.dynamic_imports = ()  # type: ignore[assignment]
    if not facts.prefix_strips:
        facts.prefix_strips = ()  # type: ignore[assignment]
    if not facts.destroy_functions:
        facts.destroy_functions = ()  # type: ignore[assignment]
    if not facts.call_names:
        facts.call_names = EMPTY_SET
    if not facts.super_calls:
        facts.super_calls = ()  # type: ignore[assignment]
    if not facts.nulled_off_main:
        facts.nulled_off_main = EMPTY_SET
    if not facts.switched_off_main:
        facts.switched_off_main = EMPTY_SET
    return facts


# Text of CUDA use (DDP006 asks whether the batches of a loader built in one
# module go to a GPU in another): a cheap necessary sign, read from the text.
_CUDA_USE = re.compile(r"""\.cuda\(|['"](?:cuda(?::\d+)?|nccl)['"]|['"]cuda:\{|cuda\.set_device\(|device_ids\s*=""")


_LOGGING_CALL = re.compile(r"(^|_)(log|logs|logger|writer|save|print|plot|record|dump|summary)(_|$)", re.IGNORECASE)
_HAND_ON_METHOD = re.compile(r"(^|_)(run|eval|evaluate|evaluation|validate|validation|test|infer|inference|"
                             r"predict|benchmark)(_|$)", re.IGNORECASE)


def _record_hand_ons(facts: "ModuleFacts") -> None:
    """``FunctionFacts.hands_on``: a function's params passed to ``obj.run(...)``
    / ``obj.evaluate(...)`` where ``obj`` is a local object (not an import, not
    ``self``, not an instance of a class of the module): a call the project
    cannot follow."""
    for call in facts.calls:
        function = facts.functions.get(call.caller) if call.caller else None
        parts = call.callee.split(".")
        if function is None or call.instance and FACTORY_CALL not in call.callee or len(parts) != 2 \
                or parts[0] in ("self", "cls") \
                or parts[0] in facts.imports or parts[0] in facts.classes \
                or not _HAND_ON_METHOD.search(parts[1]) or _LOGGING_CALL.search(parts[1]) \
                or _LOGGING_CALL.search(parts[0]):
            continue  # (``writer.log_validation(loss, generator, ...)`` records, it runs nothing: a117 whisper-vits-svc)
        for tag in call.args.values():
            if tag.startswith(PARAM_PREFIX):
                function.hands_on.add(tag[len(PARAM_PREFIX):])


def _self_part(expr: ast.AST, itself: bool = False) -> bool:
    """``self.x`` / ``self.a.b`` (``self`` itself too when ``itself``)."""
    while isinstance(expr, ast.Attribute):
        expr, itself = expr.value, True
    return itself and isinstance(expr, ast.Name) and expr.id == "self"


def _class_values(facts: "ModuleFacts", subtrees: Subtrees) -> frozenset:
    """``ModuleFacts.class_values``: names of the module's classes or of imported
    names that start with a capital, read here other than as a callee or a base
    class, and the module's decorated classes."""
    candidates = {name for name in (*facts.classes, *facts.imports) if name[:1].isupper() and "." not in name}
    if not candidates:
        return EMPTY_SET
    plain: set[int] = set()  # the Name nodes that are a callee or a base class
    found: set[str] = set()
    for node in subtrees.order:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            plain.add(id(node.func))
        elif isinstance(node, ast.ClassDef):
            plain.update(id(base) for base in node.bases if isinstance(base, ast.Name))
            if node.decorator_list and node.name in candidates:
                found.add(node.name)
    for node in subtrees.order:
        if isinstance(node, ast.Name) and node.id in candidates and id(node) not in plain \
                and isinstance(node.ctx, ast.Load):
            found.add(node.id)
    return frozenset(found) if found else EMPTY_SET


def _masks_visible_devices(tree: ast.AST, subtrees: Subtrees) -> bool:
    """``os.environ["CUDA_VISIBLE_DEVICES"] = <not a literal>`` (values.module_masks_visible_devices)."""
    for node in subtrees.of_kind(tree, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Subscript) and _dotted(target.value) == "os.environ" \
                    and isinstance(target.slice, ast.Constant) and target.slice.value == "CUDA_VISIBLE_DEVICES" \
                    and not isinstance(node.value, ast.Constant) and not _joined_list(node.value, tree, subtrees):
                return True
    return False


# Mirror of ddplint.analysis.values._DEVICE_LIST_NAME.
_DEVICE_LIST_NAME = re.compile(r"(devices|gpus|gpu_ids|device_ids|gpu_list)$", re.IGNORECASE)


def _joined_list(value: ast.AST, tree: ast.AST, subtrees: Subtrees, depth: int = 0) -> bool:
    """``",".join(...)`` with no rank name in it, or a name that every
    assignment of the module binds to one: several GPUs for the whole run, not
    one per process (values._joined_device_list); also a setting named for
    several GPUs (``cfg.cuda_visible_devices``)."""
    dotted = _dotted(value)
    if dotted is not None and _DEVICE_LIST_NAME.search(dotted.split(".")[-1]):
        return True
    if isinstance(value, ast.Name) and depth == 0:
        found = [node.value for node in subtrees.of_kind(tree, ast.Assign)
                 if any(isinstance(t, ast.Name) and t.id == value.id for t in node.targets)]
        return bool(found) and all(_joined_list(v, tree, subtrees, 1) for v in found)
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "join"
            and isinstance(value.func.value, ast.Constant) and isinstance(value.func.value.value, str)):
        return False
    return not any(isinstance(node, ast.Name) and names.RANK_NAME.match(node.id)
                   for arg in value.args for node in ast.walk(arg))


def _plain_device_setters(tree: ast.AST, facts: "ModuleFacts", subtrees: Subtrees) -> tuple[str, ...]:
    """The functions holding the module's ``set_device`` calls, when each is a plain
    function (not a method, not decorated) that the module itself only calls; ()
    when one of them may run some other way (a callback, a decorator's entry point)."""
    setters = {name for name, function in facts.functions.items() if function.sets_device}
    if not setters or any("." in name for name in setters):
        return ()
    for node in subtrees.of_kind(tree, ast.FunctionDef) + subtrees.of_kind(tree, ast.AsyncFunctionDef):
        if node.name in setters and node.decorator_list:
            return ()
    called = {id(node.func) for node in subtrees.of_kind(tree, ast.Call)}
    if any(node.id in setters and id(node) not in called and isinstance(node.ctx, ast.Load)
           for node in subtrees.order if type(node) is ast.Name):
        return ()  # handed on as a value: ``Process(target=setup)``, ``fire.Fire(main)``
    return tuple(sorted(setters))


def _names_local_rank_variable(tree: ast.AST) -> bool:
    """A string of the module names the LOCAL_RANK variable (``os.environ["LOCAL_RANK"]``,
    ``getenv("LOCAL_RANK")``, ``f"...{os.environ['LOCAL_RANK']}"``); not ``config.LOCAL_RANK``
    (an attribute), ``OMPI_COMM_WORLD_LOCAL_RANK`` (torchrun does not set it), a membership
    test (``"LOCAL_RANK" in os.environ``) nor a write (``os.environ["LOCAL_RANK"] = ...``)."""
    not_reads: set[int] = set()  # ``"LOCAL_RANK" in os.environ``, ``os.environ["LOCAL_RANK"] = ...``
    found = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and all(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            not_reads.add(id(node.left))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            # ``int(os.environ["LOCAL_RANK"]) == 0`` (a main-process test, as in a
            # ``print0`` helper): compared with an integer, the value picks no device.
            sides = (node.left, node.comparators[0])
            for side, other in (sides, sides[::-1]):
                if isinstance(other, ast.Constant) and type(other.value) is int:
                    not_reads.update(_environ_key_constants(side))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            not_reads.add(id(node.slice))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and names.LOCAL_RANK_VARIABLE.search(node.value) is not None:
            found = True
    if not found:
        return False
    return any(isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in not_reads
               and names.LOCAL_RANK_VARIABLE.search(node.value) is not None for node in ast.walk(tree))


def _environ_key_constants(expr: ast.AST) -> set[int]:
    """The key constants of ``os.environ[K]`` / ``os.environ.get(K, ...)`` /
    ``os.getenv(K, ...)`` at ``expr``, also under ``int(...)``."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "int" and expr.args:
        expr = expr.args[0]
    key = None
    if isinstance(expr, ast.Subscript) and _dotted(expr.value) == "os.environ":
        key = expr.slice
    elif isinstance(expr, ast.Call) and _dotted(expr.func) in _ENVIRON_GETTERS and expr.args:
        key = expr.args[0]
    return {id(key)} if isinstance(key, ast.Constant) else set()


_BUILTIN_NAMES = frozenset(dir(builtins))


def _may_reach_project_function(call: CallFact, facts: "ModuleFacts") -> bool:
    """Keep only calls ``Project.resolve_function`` could resolve: a function or
    class of this module, a method through an instance of one, or a name
    imported into it. Dropping the rest (``x.append``, ``print``, ``logger.info``)
    keeps summaries small: they are cached, pickled to every worker, and held
    for the whole run."""
    if FACTORY_CALL in call.callee:  # ``trainer.train(model)`` with ``trainer = build_trainer(...)``
        factory = call.callee.partition(FACTORY_CALL)[0]
        return factory.split(".")[0] in facts.imports or factory in facts.functions or bool(facts.star_imports)
    parts = call.callee.removesuffix(REGISTRY_CALL).split(".")
    head = parts[0]
    if head in facts.imports:
        return True
    if facts.star_imports and head not in _BUILTIN_NAMES and (len(parts) == 1 or call.instance and len(parts) == 2):
        return True  # a function or class that ``from pkg.mod import *`` may bring (``StateTracker(...).load()``)
    if call.instance:
        return ".".join(parts[:-1]) in facts.classes
    if len(parts) > 1 and any(tag in (DDP_MODEL, FSDP_MODEL) or tag.startswith(PARAM_PREFIX)
                              for tag in call.args.values()):
        return True  # ``trainer.train(model)`` on an instance of unknown class: Project._by_method_name
    if len(parts) == 1 and facts.star_imports and head not in _BUILTIN_NAMES:
        return True  # ``from pkg.data import *`` then ``get_loader(...)``: Project._star_definition
    return len(parts) == 1 and (head in facts.functions or head in facts.classes)


_BUILTIN_NAMES = frozenset(dir(builtins))





def _int(expr: ast.AST) -> Optional[int]:
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr.value
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = _int(expr.operand)
        return -inner if inner is not None else None
    return None


class _Extractor:
    """One recursive walk over statements; the calls and assignments under a
    node come from the module's subtree index (``Subtrees``), never a re-walk."""

    def __init__(self, facts: ModuleFacts, mentions_local_rank: bool, subtrees: Subtrees) -> None:
        self.facts = facts
        self.subtrees = subtrees
        self.mentions_local_rank = mentions_local_rank  # skips an ast.dump per device call
        self.function: Optional[FunctionFacts] = None
        self.module_sets_device = False  # a set_device call outside every function
        self.guards: list[bool] = []  # one entry per enclosing rank guard: strict?
        # ``True`` values stored as the single-process arm of a rank flag
        # (``if cfg.distributed: self.is_main = cfg.rank == 0 else: self.is_main = True``).
        self.single_process_true: set[int] = set()
        # The guards of the arm the code sits in that leave the main rank only
        # (the body of ``if rank == 0:``, the ``else`` of ``if rank != 0:``, after
        # ``if rank != 0: return``; not the ``else`` of ``if rank == 0:``, which
        # every other rank runs): what saves (DDP011) and their callers ask.
        self.main_guards: list[bool] = []
        self.off_main = 0  # enclosing arms of rank tests that rank 0 never takes
        self.single_arms = 0  # enclosing arms that only a single-process run takes
        self.maybe_guards: list[str] = []  # imported calls in other enclosing ``if`` tests
        # Attributes tested in the body of enclosing ``if``s that are no rank test
        # here (``if args.should_save:``): a rank flag set in another module, maybe.
        self.flag_guards: list[str] = []
        # the enclosing function's parameters the current statement needs true (CallFact.needs_flags)
        self.param_flags: list[str] = []
        self.expression_flags: dict[int, tuple[str, ...]] = {}
        # Enclosing ``if``s on something other than the rank or "distributed or
        # not" (``if use_fsdp_eval:``): a collective there may never run.
        self.opaque = 0
        self.no_grad = 0  # enclosing ``with torch.no_grad():`` blocks (and no-grad decorated functions)
        self.loops = 0  # enclosing ``for`` / ``while`` loops of the current function
        # The function being read, and whether it runs a training loop (``_has_training_loop``):
        # worked out only for functions that save (the one question that needs it).
        self.function_node: Optional[ast.AST] = None
        # Parameters (default None) that the enclosing ``if`` arms need passed: ``if model is not None:``
        self.given: list[str] = []
        self.none_defaults: set[str] = set()  # the current function's parameters whose default is None
        self.unguarded_saves: list[set[str]] = []  # per unguarded save of the current function: its ``given``
        self.assigned: list[dict[str, list[ast.AST]]] = [{}]  # per scope: name -> values
        # per scope: name -> the calls (callee as written, argument position) it was handed to so far
        self.handed: list[dict[str, list[str]]] = [{}]
        # this module's own decorators that run the function they wrap on one rank only
        self.rank_gates: tuple[str, ...] = ()
        # per scope: name -> (call, item) for ``a, b = f(...)`` (item "0", "1", ...)
        self.unpacked: list[dict[str, list[tuple[ast.Call, str]]]] = [{}]
        self.returns: list[list[ast.AST]] = [[]]  # per function: returned values
        self.agreed: list[set[str]] = [set()]  # per function: names a collective agreed on
        # Classes: the class whose body directly holds the statement being read
        # ("" elsewhere), the class ``self`` belongs to in the enclosing method,
        # and per class, instance attributes bound to a constructor call
        # (``self.store = Store()``: "store" -> "Store").
        self.owner = ""
        self.self_class = ""
        self.attributes: dict[str, dict[str, str]] = {}
        self.class_methods: dict[str, frozenset] = {}  # class key -> the names of its methods
        # classes whose own ``state_dict()`` returns a dict of plain values (a grad clipper's
        # moving averages): ``torch.save(self.state_dict(), ...)`` there is no model state
        self.scalar_state_classes: set[str] = set()
        self.numpy_attributes: dict[str, frozenset[str]] = {}  # class -> attributes holding numpy arrays

    # ------------------------------------------------------------------ names
    def qualified(self, expr: ast.AST) -> Optional[str]:
        return _qualified(self.facts, expr)

    def passes_through(self, expr: ast.AST, param: str, depth: int = 0) -> bool:
        """Is ``expr`` the tensor ``param`` or a copy that keeps its history
        (``param``, ``param.clone()``, ``rt / n`` with ``rt = param.clone()``)?"""
        if depth > 4:
            return False
        if isinstance(expr, ast.Name):
            if expr.id == param:
                return True
            values = self.values_of(expr.id)
            return bool(values) and all(self.passes_through(v, param, depth + 1) for v in values)
        if isinstance(expr, ast.BinOp):
            return self.passes_through(expr.left, param, depth + 1) or \
                self.passes_through(expr.right, param, depth + 1)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) \
                and expr.func.attr in _HISTORY_KEEPING_METHODS:
            return self.passes_through(expr.func.value, param, depth + 1)
        return False

    def values_of(self, name: str) -> list[ast.AST]:
        for depth, scope in enumerate(reversed(self.assigned)):
            if name in scope:
                return scope[name]
            if depth == 0 and self.function is not None and name.split(".")[0] in self.function.params:
                return []  # a parameter (or its attribute) shadows what outer scopes bind under that name
        return []

    # ------------------------------------------------------------------ rank tests
    def rank_value(self, expr: ast.AST, lenient: bool, depth: int = 0) -> bool:
        if depth > 4:
            return False
        if isinstance(expr, ast.Call):
            if self.env_key(expr) in _RANK_VARIABLES:
                return True
            if isinstance(expr.func, ast.Name) and expr.func.id in ("int", "str") and expr.args:
                return self.rank_value(expr.args[0], lenient, depth + 1)
            dotted = _dotted(expr.func) or ""
            last = dotted.split(".")[-1]
            return last in ("get_rank", "get_local_rank", "get_global_rank", "get_node_local_rank",
                            "get_world_rank") or RANK_NAME.match(last) is not None  # ``smp.dp_rank()``
        if isinstance(expr, ast.Subscript):
            key = expr.slice
            return self.env_key(expr) in _RANK_VARIABLES or (
                isinstance(key, ast.Constant) and isinstance(key.value, str) and RANK_NAME.match(key.value) is not None)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Mod, ast.FloorDiv)):
            return self.rank_value(expr.left, lenient, depth + 1)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):  # mirror of ranks.is_rank_value
            sides = (expr.left, expr.right)
            return any(isinstance(side, ast.BinOp) and isinstance(side.op, ast.Mult) for side in sides) \
                and any(self.rank_value(side, lenient, depth + 1) for side in sides)
        dotted = _dotted(expr)
        if dotted is None:
            return False
        last = dotted.split(".")[-1]
        if RANK_NAME.match(last) or (lenient and last.lower() in _PROCESS_INDEX_NAMES):
            return True
        values = self.values_of(dotted) if isinstance(expr, ast.Name) else []
        return bool(values) and all(self.rank_value(v, lenient, depth + 1) for v in values)

    def rank_flag_value(self, value: ast.AST) -> bool:
        """A value stored as a rank flag: a rank test (a comparison, a predicate
        call, ``not``/``and``/``or`` of them), or a boolean literal under a rank
        guard (``if rank == 0: opt.log = True`` / ``else: opt.log = False``)."""
        if isinstance(value, ast.Constant) and isinstance(value.value, bool):
            return bool(self.guards) or id(value) in self.single_process_true
        return isinstance(value, (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Call)) \
            and self.rank_test(value, lenient=True)

    def single_process_flags(self, node: ast.If) -> list[int]:
        """``if cfg.distributed: self.is_main = cfg.rank == 0 else: self.is_main =
        True`` (or under ``if not cfg.distributed:``): the ``True`` of the arm
        without processes is the main-rank flag of a single process. The ids of
        those ``True`` values."""
        test, distributed, single = node.test, node.body, node.orelse
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, distributed, single = test.operand, node.orelse, node.body
        if not _is_distribution_test(test):
            return []
        main_flags = set()
        for statement in distributed:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                    and isinstance(statement.targets[0], ast.Attribute) \
                    and isinstance(statement.value, (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Call)) \
                    and self.rank_test(statement.value, lenient=True) and _main_only(statement.value, True):
                main_flags.add(_dotted(statement.targets[0]))
        return [id(statement.value) for statement in single
                if isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Attribute)
                and isinstance(statement.value, ast.Constant) and statement.value.value is True
                and _dotted(statement.targets[0]) in main_flags - {None}]

    def module_paths(self) -> list[str]:
        """The string literals of the module that spell a dotted module path
        three parts deep or more ("pkg.trainers.trainerWRF")."""
        if self.subtrees.order is None or not self.subtrees.order:
            return []
        found = []
        for node in self.subtrees.under(self.subtrees.order[0]):
            if type(node) is ast.Constant and isinstance(node.value, str) and node.value.count(".") >= 2 \
                    and len(found) < 64 and _MODULE_PATH.match(node.value) and node.value not in found:
                found.append(node.value)
        return found

    def off_main_arm(self, test: ast.AST, truth: bool, depth: int = 0) -> bool:
        """Does ``test`` being ``truth`` exclude rank 0 (``rank != 0``, ``not
        is_main()``, ``args.distributed and args.gpu != 0``)? Operands that are
        not rank tests are left out of ``and`` / ``or``."""
        if depth > 6:
            return False
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.off_main_arm(test.operand, not truth, depth + 1)
        if isinstance(test, ast.BoolOp):
            if isinstance(test.op, ast.And) != truth:
                return False  # ``a and b`` false / ``a or b`` true: either may hold
            return any(self.off_main_arm(v, truth, depth + 1) for v in test.values
                       if self.rank_test(v, lenient=True))
        return self.rank_test(test, lenient=True) and _main_only(test, not truth)

    def env_key(self, expr: ast.AST) -> Optional[str]:
        """The variable an environment read names: ``os.environ["RANK"]``,
        ``os.getenv("RANK")``, ``env.get("RANK")`` on a copy of the environment."""
        if isinstance(expr, ast.Subscript) and self.is_environ(expr.value):
            key = expr.slice
            return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
        if isinstance(expr, ast.Call) and expr.args and (
                self.qualified(expr.func) in _ENVIRON_GETTERS or (
                    isinstance(expr.func, ast.Attribute) and expr.func.attr == "get"
                    and self.is_environ(expr.func.value))):
            key = expr.args[0]
            return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
        return None

    def rank_test(self, test: ast.AST, lenient: bool, depth: int = 0) -> bool:
        """Mirror of ddplint.analysis.ranks.is_rank_condition over ``ast``."""
        if depth > 6:
            return False
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.rank_test(test.operand, lenient, depth + 1)
        if isinstance(test, ast.BoolOp):
            return any(self.rank_test(value, lenient, depth + 1) for value in test.values)
        if isinstance(test, ast.Compare):
            if _is_distributed_flag_test(test):
                return False  # "distributed or not": the same on every rank
            operands = [test.left, *test.comparators]
            if lenient and len(operands) == 2 and any(self.first_gpu(o) for o in operands):
                return True  # mirror of ranks._first_gpu: the process on GPU 0
            return any(self.rank_value(o, lenient) for o in operands)
        if isinstance(test, ast.Call):
            dotted = _dotted(test.func) or ""
            last = dotted.split(".")[-1]
            if names.is_rank_predicate_name(last):
                return True
            if lenient and dotted == f"self.{last}" and self.self_class:
                # ``if self._on_main_rank():`` (mirror of ranks._rank_property, lenient)
                method = self.facts.functions.get(f"{self.self_class}.{last}")
                return method is not None and method.rank_predicate_lenient
            function = self.facts.functions.get(last) if "." not in dotted else None
            return function is not None and function.rank_predicate
        dotted = _dotted(test)
        if dotted is not None:
            last = dotted.split(".")[-1]
            values = [v for v in self.values_of(dotted)
                      if not (isinstance(v, ast.Constant) and isinstance(v.value, bool))]
            if values:
                return all(self.rank_test(v, lenient, depth + 1) for v in values)
            if names.is_rank_predicate_name(last):
                # ``if is_main_process:`` naming an imported or defined function is always true.
                return dotted.split(".")[0] not in self.facts.imports and dotted not in self.facts.functions
            return lenient and self.rank_value(test, lenient)
        return False

    def first_gpu(self, expr: ast.AST) -> bool:
        """Mirror of ddplint.analysis.ranks._first_gpu."""
        if isinstance(expr, ast.Call) and self.qualified(expr.func) == "torch.device" and expr.args \
                and not expr.keywords:
            values = expr.args
            return (len(values) == 1 and isinstance(values[0], ast.Constant) and values[0].value == "cuda:0") or (
                len(values) == 2 and isinstance(values[0], ast.Constant) and values[0].value == "cuda"
                and _int(values[1]) == 0)
        return isinstance(expr, ast.Constant) and expr.value == "cuda:0"

    # ------------------------------------------------------------------ statements
    def module(self, tree: ast.Module) -> None:
        self.block(tree.body)

    def block(self, statements: list[ast.stmt]) -> None:
        pushed = main_pushed = opaque_pushed = flags_pushed = 0
        for statement in statements:
            self.statement(statement)
            # ``if rank != 0: return`` guards the rest of the block.
            if isinstance(statement, ast.If) and not statement.orelse and _always_exits(statement.body):
                if self.rank_test(statement.test, lenient=True):
                    self.guards.append(self.rank_test(statement.test, lenient=False))
                    pushed += 1
                    if _main_only(statement.test, False):
                        self.main_guards.append(self.guards[-1])
                        main_pushed += 1
                elif self.reads_flag_parameter(statement.test):
                    # ``if not do_broadcast: return``: what follows runs only when the
                    # caller asks for it (a collective there is the caller's choice).
                    self.opaque += 1
                    opaque_pushed += 1
                else:
                    # ``if not self.is_master: return``: the rest needs the attribute true,
                    # as under ``if self.is_master:`` (a rank flag when the project says so).
                    exits = _exit_attributes(statement.test)
                    self.flag_guards.extend(exits)
                    flags_pushed += len(exits)
        if flags_pushed:
            del self.flag_guards[-flags_pushed:]
        if pushed:
            del self.guards[-pushed:]
        if main_pushed:
            del self.main_guards[-main_pushed:]
        self.opaque -= opaque_pushed

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.function_def(node)
        elif isinstance(node, ast.ClassDef):
            self.class_def(node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.facts.imports[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    self.facts.imports.setdefault(head, head)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name == "*":
                    self.facts.star_imports.append(base)
                    continue
                separator = "" if base.endswith(".") else "."
                self.facts.imports[alias.asname or alias.name] = \
                    f"{base}{separator}{alias.name}" if base else alias.name
        elif isinstance(node, ast.If):
            self.expressions([node.test])
            strict = self.rank_test(node.test, lenient=False)
            lenient = strict or self.rank_test(node.test, lenient=True)
            maybe = [] if lenient else self.imported_calls(node.test)
            flags = [] if lenient else _tested_attributes(node.test)
            opaque = not lenient and (not _is_distribution_test(node.test) or self.reads_flag_parameter(node.test))
            if lenient:
                self.guards.append(strict)
            elif node.orelse:
                self.single_process_true.update(self.single_process_flags(node))
            self.maybe_guards.extend(maybe)
            self.opaque += opaque
            for arm, truth in ((node.body, True), (node.orelse, False)):
                main = lenient and _main_only(node.test, truth)
                if main:
                    self.main_guards.append(strict)
                off_main = lenient and self.off_main_arm(node.test, truth)  # the arm rank 0 never takes
                self.off_main += off_main
                single = _single_process_arm(node.test, truth)
                self.single_arms += single
                flagged = flags if truth else []
                self.flag_guards.extend(flagged)
                given = self.given_by(node.test, truth)
                self.given.extend(given)
                switches = _switch_params(node.test, self.function.params + self.constructor_attributes()) \
                    if truth and self.function else []
                self.param_flags.extend(switches)
                self.block(arm)
                if switches:
                    del self.param_flags[-len(switches):]
                if given:
                    del self.given[-len(given):]
                if flagged:
                    del self.flag_guards[-len(flagged):]
                if main:
                    self.main_guards.pop()
                self.off_main -= off_main
                self.single_arms -= single
            self.opaque -= opaque
            if lenient:
                self.guards.pop()
            if maybe:
                del self.maybe_guards[-len(maybe):]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            if isinstance(node, (ast.For, ast.AsyncFor)):
                if ("epoch" in _text_of(node.target).lower() or "epoch" in _text_of(node.iter).lower()) \
                        and any(isinstance(n, ast.Call) for statement in node.body for n in _walk(statement)):
                    # (not ``for i in range(1, epochs): lr[i] = lr[i - 1] * mult``, a schedule's table:
                    # an epoch loop runs something)
                    self.facts.has_epoch_loop = True
                self.expressions([node.iter])
            else:
                if "epoch" in ast.dump(node.test).lower() or _iterates_a_loader(node.body, self.is_loader_name):
                    # ``while keep_training: for batch in train_loader: ...`` re-iterates the loader.
                    self.facts.has_epoch_loop = True
                self.expressions([node.test])
            self.loops += 1
            self.block(node.body)
            self.loops -= 1
            self.block(node.orelse)
        elif isinstance(node, ast.Return):
            if node.value is not None:
                self.returns[-1].append(node.value)
                self.expressions([node.value])
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None:
                self.expressions([node.value])  # before the binding: ``m = DDP(prep(m))``
                for target in targets:
                    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(node.value, ast.Call):
                        for item, element in enumerate(target.elts):
                            if isinstance(element, ast.Name):
                                self.unpacked[-1].setdefault(element.id, []).append((node.value, str(item)))
                    dotted = _dotted(target)
                    if dotted is not None:
                        self.assigned[-1].setdefault(dotted, []).append(node.value)
                        wrapped = self.wrapper_of(node.value) if self.function is None else ""
                        if wrapped and "." not in dotted:  # ``model = DDP(model)`` in a script
                            self.facts.wrapped_globals[dotted] = wrapped
                    if isinstance(target, ast.Attribute):
                        flags = self.facts.attribute_flags
                        flags[target.attr] = flags.get(target.attr, True) and self.rank_flag_value(node.value)
                        if self.off_main and _empty_literal(node.value):
                            # ``if rank != 0: cfg.ckpt_dir = None`` / ``self.verbose = False``
                            self.facts.nulled_off_main.add(target.attr)
                            if node.value.value is False:
                                self.facts.switched_off_main.add(target.attr)
                    elif _same_length_tuples(target, node.value):  # ``a, b = 0, 0``: element by element
                        for element, value in zip(target.elts, node.value.elts):
                            name = _dotted(element)
                            if name is not None:
                                self.assigned[-1].setdefault(name, []).append(value)
        elif isinstance(node, (ast.With, ast.AsyncWith)) and any(
                _disables_grad(item.context_expr) for item in node.items):
            self.expressions([item.context_expr for item in node.items])
            self.no_grad += 1
            self.block(node.body)
            self.no_grad -= 1
        else:
            children = []
            for name, value in ast.iter_fields(node):
                if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                    self.block(value)
                elif isinstance(value, list) and value and isinstance(value[0], ast.excepthandler):
                    for handler in value:
                        if _restarts_an_iterator(handler) and not (
                                self.function is not None and self.function.name.split(".")[-1] == "__next__"):
                            # (not the ``__next__`` of a generic wrapper that repeats whatever loader it is
                            # given, DeepSpeed's ``RepeatingLoader``: the epochs are its user's to count)
                            # ``except StopIteration: it = iter(loader)``: the loader is iterated
                            # again and again, pass after pass (an epoch loop in all but name)
                            self.facts.has_epoch_loop = True
                        self.block(handler.body)
                elif isinstance(value, list) and value and isinstance(value[0], ast.withitem):
                    children.extend(item.context_expr for item in value)
                elif isinstance(value, ast.expr):
                    children.append(value)
                elif isinstance(value, list):
                    children.extend(v for v in value if isinstance(v, ast.expr))
            self.expressions(children)

    def imported_calls(self, test: ast.AST) -> list[str]:
        """Calls in an ``if`` test whose answer the join knows: imported helpers, and
        methods called on ``self`` ("Trainer._should_save", a rank test when a project
        subclass overrides it with one: Project.override_is_rank_predicate)."""
        found = []
        for node in self.subtrees.of_kind(test, ast.Call):
            dotted = _dotted(node.func)
            if dotted is not None and dotted.split(".")[0] in self.facts.imports:
                found.append(dotted)
            elif dotted is not None and dotted.startswith("self.") and dotted.count(".") == 1 and self.self_class:
                found.append(f"{self.self_class}.{dotted[5:]}")
        return found

    def class_def(self, node: ast.ClassDef) -> None:
        """Methods are keyed by class ("Trainer.fit"); only the statements
        directly in the class body are its methods and nested classes."""
        self.expressions(node.decorator_list)
        key = f"{self.owner}.{node.name}" if self.owner else node.name
        self.facts.classes.setdefault(key, tuple(filter(None, (_dotted(base) for base in node.bases))))
        self.attributes.setdefault(key, self.instance_attributes(node))
        self.class_methods.setdefault(key, frozenset(
            m.name for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))))
        wrapped = self.wrapped_attributes(node)
        if wrapped:
            self.facts.wrapped_attributes.setdefault(key, wrapped)
        stored = _attribute_params(node, self.subtrees)
        if stored:
            self.facts.attribute_params.setdefault(key, stored)
        returned = self.attribute_returns(node, wrapped)
        if returned:
            self.facts.attribute_returns.setdefault(key, returned)
        if self.reads_rank_and_world(node):
            self.facts.rank_sharding_classes.add(key)
        if _state_dict_of_plain_values(node):
            self.scalar_state_classes.add(key)
        self.numpy_attributes[key] = self.arrays_of(node)
        for method in node.body:
            if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for call in self.subtrees.of_kind(method, ast.Call):
                    func = call.func
                    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) \
                            and isinstance(func.value.func, ast.Name) and func.value.func.id == "super" \
                            and f"{key}.{func.attr}" not in self.facts.super_calls:
                        self.facts.super_calls.append(f"{key}.{func.attr}")
        outer = self.owner
        for statement in node.body:
            direct = isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            self.owner = key if direct else ""
            self.statement(statement)
        self.owner = outer

    def instance_attributes(self, node: ast.ClassDef) -> dict[str, str]:
        """``self.NAME = Cls(...)`` anywhere in the class's methods: NAME -> "Cls"
        (attributes bound to different classes are left out)."""
        found: dict[str, set[str]] = {}
        for child in self.assignments(node):
            if isinstance(child.value, ast.Call):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                cls = self.class_ref(child.value.func)
                for target in targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                            and target.value.id == "self":
                        found.setdefault(target.attr, set()).add(cls)
        return {name: refs.pop() for name, refs in found.items() if len(refs) == 1 and "" not in refs}

    def attribute_returns(self, node: ast.ClassDef, wrapped: dict[str, str]) -> dict[str, str]:
        """``self.NAME = f(...)`` in the class's methods with ``f`` a possible project
        function (not a library's, not a class): NAME -> RETURN_PREFIX tag(s)."""
        found: dict[str, set[str]] = {}
        for child in self.subtrees.of_kind(node, ast.Assign):
            value = child.value
            callee = _dotted(value.func) if isinstance(value, ast.Call) else None
            if callee is None or not self.may_be_project_callee(callee) or callee.split(".")[-1][:1].isupper() \
                    or (self.qualified(value.func) or "").startswith(LIBRARY_PREFIXES):
                continue
            for target in child.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == "self" and target.attr not in wrapped:
                    found.setdefault(target.attr, set()).add(f"{RETURN_PREFIX}{callee}:")
        return {name: "|".join(sorted(tags)) for name, tags in found.items()}

    def wrapped_attributes(self, node: ast.ClassDef) -> dict[str, str]:
        """``self.NAME = DDP(...)`` / ``FSDP(...)`` in the class's methods, and
        properties that return a wrap or such an attribute (a runner's lazily
        wrapped ``model``)."""
        found: dict[str, str] = {}
        for child in self.subtrees.of_kind(node, ast.Assign):
            kind = self.wrapper_of(child.value)
            for target in child.targets if kind else ():
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == "self":
                    found.setdefault(target.attr, kind)
        for attribute in self.unwrapped_after_wrap(node):
            found.pop(attribute, None)
        for method in node.body:
            if not isinstance(method, ast.FunctionDef) or not any(
                    (_dotted(d) or "").split(".")[-1] in ("property", "cached_property") for d in method.decorator_list):
                continue
            for returned in (n for n in ast.walk(method) if isinstance(n, ast.Return)):  # properties are few
                value = returned.value
                kind = self.wrapper_of(value) if value is not None else ""
                if not kind and isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) \
                        and value.value.id == "self":
                    kind = found.get(value.attr, "")
                if kind:
                    found.setdefault(method.name, kind)
        return found

    def unwrapped_after_wrap(self, node: ast.ClassDef) -> set[str]:
        """``self.model = DDP(self.model, ...)`` then ``self.model = self.model.module``
        later in the same method: the wrapper is thrown away and the attribute holds
        the plain model from then on (a62 DDPM-weather)."""
        found = set()
        for method in node.body:
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            wraps: dict[str, int] = {}
            for child in sorted(self.subtrees.of_kind(method, ast.Assign), key=lambda n: (n.lineno, n.col_offset)):
                for target in child.targets:
                    if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self"):
                        continue
                    if self.wrapper_of(child.value):
                        wraps[target.attr] = child.lineno
                    elif target.attr in wraps and isinstance(child.value, ast.Attribute) \
                            and child.value.attr == "module" and _dotted(child.value.value) == f"self.{target.attr}":
                        found.add(target.attr)
        return found

    def loop_facts(self, node: ast.AST, facts: "FunctionFacts") -> None:
        """runs_backward, keeps and returns_wrapped of one function."""
        params = [p for p in facts.params if p not in ("self", "cls")]
        subtrees = self.subtrees
        for child in subtrees.of_kind(node, ast.Call):
            func = child.func
            if isinstance(func, ast.Attribute) and func.attr == "backward" and not child.args and not (
                    isinstance(func.value, ast.Name) and func.value.id in ("self", "super")):
                facts.runs_backward = True
            elif self.qualified(func) == "torch.autograd.backward":
                facts.runs_backward = True
            if isinstance(func, ast.Attribute) and func.attr in ("append", "extend", "insert") \
                    and child.args and (_dotted(func.value) or "").startswith("self."):
                facts.keeps.update(p for p in params if _reads_raw(child.args[-1], p))
        arrays = self.numpy_attributes.get(self.self_class, frozenset())
        for child in subtrees.of_kind(node, ast.AugAssign):
            if _on_self(child.target) and not _element_of(child.target, arrays):
                facts.keeps.update(p for p in params if _reads_raw(child.value, p))
        for child in subtrees.of_kind(node, ast.Assign):
            if len(child.targets) == 1 and _on_self(child.targets[0]) \
                    and isinstance(child.value, ast.BinOp) and _dotted(child.targets[0]) is not None \
                    and any(_dotted(n) == _dotted(child.targets[0]) for n in subtrees.under(child.value)):
                facts.keeps.update(p for p in params if _reads_raw(child.value, p))
        for value in self.returns[-1]:
            items = list(enumerate(value.elts)) if isinstance(value, ast.Tuple) else [(None, value)]
            if isinstance(value, ast.Dict):  # ``return {"classifier": classifier, ...}``: by key
                items = [(key.value, item) for key, item in zip(value.keys, value.values)
                         if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.isidentifier()]
            for position, item in items:
                kind = self.wrapper_of(item)
                if not kind and isinstance(item, ast.Name):
                    kind = next((k for k in map(self.wrapper_of, self.values_of(item.id)) if k), "")
                if not kind and _on_self(item):  # ``self.model = FSDP(model, ...)`` ... ``return self.model``
                    kind = self.wrapped_here(node, item)
                if kind:
                    facts.returns_wrapped.setdefault("" if position is None else str(position), kind)
                elif isinstance(item, ast.Name):
                    tag = self.return_tag(item)
                    if tag:
                        facts.returns_through.setdefault("" if position is None else str(position), tag)
                elif isinstance(item, ast.Call) and position is None and self.self_class \
                        and isinstance(item.func, ast.Attribute) and _dotted(item.func.value) == "self":
                    # ``return self.model_init_full(model)``: what that method of the class returns
                    tag = f"{RETURN_PREFIX}{self.self_class}.{item.func.attr}:"
                    known = facts.returns_through.get("", "")
                    facts.returns_through[""] = "|".join(sorted({*known.split("|"), tag} - {""}))
        objects = [value.id for value in self.returns[-1] if isinstance(value, ast.Name) and value.id[:1].isupper()
                   and (value.id in self.facts.classes or value.id in self.facts.imports or self.facts.star_imports)]
        if objects and len(objects) == len(self.returns[-1]):
            facts.returns_class_objects = tuple(sorted(set(objects)))  # ``return DatasetDDP`` (the class itself)
        classes = set().union(*(self.instance_classes(value) or {""} for value in self.returns[-1]))
        if classes and "" not in classes:
            facts.returns_classes = tuple(sorted(classes))
        facts.returns_detached = self.detached_positions(self.returns[-1])
        facts.returns_ranks = self.returned_ranks(self.returns[-1])

    def saved_on_cpu(self, saved: ast.AST, save: ast.Call) -> bool:
        """Does the saved object hold CPU tensors: a ``.cpu()`` inside it (``{k: v.cpu() ...}``,
        ``net.cpu().state_dict()``), or the state of a model the function moved with a
        ``net.cpu()`` statement before the save and not back since (a115 DeepLab-v3-plus)?"""
        values = [saved, *(self.values_of(saved.id) if isinstance(saved, ast.Name) else ())]
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "cpu"
               for value in values for n in ast.walk(value)):
            return True
        owners = {(_dotted(n.func.value) or "").removesuffix(".module") for value in values for n in ast.walk(value)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "state_dict"}
        owners.discard("")
        if not owners or self.function_node is None:
            return False
        moves = sorted((n.lineno, n.value.func.attr) for n in ast.walk(self.function_node)
                       if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                       and isinstance(n.value.func, ast.Attribute) and n.value.func.attr in ("cpu", "cuda", "to")
                       and _dotted(n.value.func.value) in owners and n.lineno < save.lineno)
        return bool(moves) and moves[-1][1] == "cpu"

    def wrapped_here(self, function: ast.AST, attribute: ast.AST) -> str:
        """"ddp"/"fsdp" when the function assigns a DDP/FSDP wrap to ``attribute``
        (``self.model``) itself; "" otherwise."""
        written = _dotted(attribute)
        for child in self.subtrees.of_kind(function, ast.Assign):
            kind = self.wrapper_of(child.value)
            if kind and any(_dotted(target) == written for target in child.targets):
                return kind
        return ""

    def returned_ranks(self, returns: list[ast.AST]) -> dict[str, str]:
        """FunctionFacts.returns_ranks: per position, the one rank kind every
        return gives (integer constants allowed: a single-process fallback)."""
        if not returns:
            return {}
        if all(isinstance(r, ast.Tuple) for r in returns):
            sizes = {len(r.elts) for r in returns}
            if len(sizes) != 1:
                return {}
            columns = {str(i): [r.elts[i] for r in returns] for i in range(sizes.pop())}
        elif not any(isinstance(r, ast.Tuple) for r in returns):
            columns = {"": list(returns)}
        else:
            return {}
        found = {}
        for position, values in columns.items():
            tags: set[str] = set()
            for value in values:
                tags |= self.value_tags(value)
            ranks = tags & {GLOBAL_RANK, LOCAL_RANK}
            if len(ranks) == 1 and tags <= ranks | {LITERAL}:
                found[position] = ranks.pop()
        return found

    def param_attribute_ranks(self, params: tuple[str, ...]) -> dict[str, str]:
        """FunctionFacts.sets_param_ranks: ``param.attr`` -> the one rank kind every
        assignment of that attribute in the function gives (integer constants allowed)."""
        found = {}
        for dotted, values in self.assigned[-1].items():
            head, _, attribute = dotted.partition(".")
            if head not in params or head in ("self", "cls") or not attribute or "." in attribute:
                continue
            tags = set().union(*(self.value_tags(value) for value in values))
            ranks = tags & {GLOBAL_RANK, LOCAL_RANK}
            if len(ranks) == 1 and tags <= ranks | {LITERAL}:
                found[dotted] = ranks.pop()
        return found

    def detached_positions(self, returns: list[ast.AST]) -> set[str]:
        """Positions of the returned tuples that hold no autograd history in every return."""
        tuples = [r for r in returns if isinstance(r, ast.Tuple)]
        if not returns or len(tuples) != len(returns):
            return set()
        found = set()
        for position in range(min(len(t.elts) for t in tuples)):
            if all(self.is_detached(t.elts[position]) for t in tuples):
                found.add(str(position))
        return found

    def is_detached(self, expr: ast.AST, depth: int = 0) -> bool:
        """``x.detach()``, ``x.item()``, ``float(x)``, a constant, or a name every binding of which is one."""
        if isinstance(expr, ast.Constant):
            return True
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Attribute) and func.attr in _SANITISERS:
                return True
            return isinstance(func, ast.Name) and func.id in ("float", "int", "bool", "len", "str", "round")
        if isinstance(expr, ast.Name) and depth < 3:
            values = self.values_of(expr.id)
            return bool(values) and all(self.is_detached(v, depth + 1) for v in values)
        return False

    def function_def(self, node: ast.AST) -> None:
        args = node.args
        params = tuple(a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs])
        key = f"{self.owner}.{node.name}" if self.owner else node.name
        facts = FunctionFacts(key, params)
        outer_owner, outer_self = self.owner, self.self_class
        self.self_class = self.owner or self.self_class  # nested functions keep the method's ``self``
        self.owner = ""
        facts.rank_zero_only = any(
            (_dotted(d.func if isinstance(d, ast.Call) else d) or "").split(".")[-1]
            in _rank_zero_decorators() + self.rank_gates for d in node.decorator_list)
        self.expressions(node.decorator_list)
        if not outer_owner and self.function is None:
            for registry in _registries(node.decorator_list):
                self.facts.registered[registry] = (*self.facts.registered.get(registry, ()), node.name)
        outer, outer_guards, outer_maybe, outer_opaque = self.function, self.guards, self.maybe_guards, self.opaque
        outer_main, outer_flags = self.main_guards, self.flag_guards
        self.function, self.guards, self.maybe_guards, self.opaque, self.main_guards = facts, [], [], 0, []
        self.flag_guards = []
        outer_no_grad, outer_loops = self.no_grad, self.loops
        self.no_grad = 1 if any(_disables_grad(d) for d in node.decorator_list) else 0
        self.loops = 0
        outer_given = (self.given, self.none_defaults, self.unguarded_saves)
        self.given, self.unguarded_saves = [], []
        self.none_defaults = _params_defaulting_to(args, None)
        facts.true_defaults = _params_defaulting_to(args, True)
        facts.false_defaults = _params_defaulting_to(args, False) | self.none_defaults
        outer_switches = (self.param_flags, self.expression_flags)
        self.param_flags, self.expression_flags = [], _expression_switches(node, params + self.constructor_attributes())
        facts.annotated_wrapped = {
            a.arg: kind for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]
            if a.annotation is not None and (kind := self.wrapper_class(a.annotation))}
        outer_node, self.function_node = self.function_node, node
        self.assigned.append({})
        self.handed.append({})
        self.unpacked.append({})
        self.returns.append([])
        self.agreed.append(set())
        self.block(node.body)
        facts.rank_predicate = self.returns_rank_test(node)
        if facts.trains is None:
            facts.trains = _has_training_loop(node)
        facts.steps_optimizer = _steps_an_optimizer(node)
        facts.rank_predicate_lenient = facts.rank_predicate or self.returns_rank_test(node, lenient=True)
        facts.returns_agreed = bool(self.returns[-1]) and all(
            _derives_from(value, self.agreed[-1]) for value in self.returns[-1])
        facts.returns_params = {p for p in params if self.returns[-1] and all(
            self.passes_through(value, p) for value in self.returns[-1])}
        self.loop_facts(node, facts)
        facts.sampler_switch = self.sampler_switch(node)
        facts.sets_param_ranks = self.param_attribute_ranks(params)
        if outer_owner and params and params[0] == "self" and node.name != "__init__":
            facts.reshapes_self = self.reshapes_self(node)
        self.agreed.pop()
        self.returns.pop()
        self.assigned.pop()
        self.handed.pop()
        self.unpacked.pop()
        self.function, self.guards, self.maybe_guards, self.opaque = outer, outer_guards, outer_maybe, outer_opaque
        self.main_guards, self.flag_guards = outer_main, outer_flags
        self.param_flags, self.expression_flags = outer_switches
        self.no_grad, self.loops = outer_no_grad, outer_loops
        if self.unguarded_saves:
            facts.saves_need = tuple(sorted(set.intersection(*self.unguarded_saves)))
        self.given, self.none_defaults, self.unguarded_saves = outer_given
        self.function_node = outer_node
        self.owner, self.self_class = outer_owner, outer_self
        self.facts.functions.setdefault(key, facts)

    def reshapes_self(self, node: ast.AST) -> str:
        """FunctionFacts.reshapes_self for the method ``node``."""
        of_kind = self.subtrees.of_kind
        assigns = of_kind(node, ast.Assign)
        made = {t.id for a in assigns if isinstance(a.value, ast.Call) and self.nn_module_class(a.value.func)
                for t in a.targets if isinstance(t, ast.Name)}
        for a in assigns:
            value = a.value
            new = (isinstance(value, ast.Call) and self.nn_module_class(value.func)) \
                or (isinstance(value, ast.Name) and value.id in made)
            if new and any(isinstance(t, ast.Attribute) and _self_part(t.value, True) for t in a.targets):
                return "new"
        for loop in (n for n in self.subtrees.under(node) if type(n) is ast.For):
            it = loop.iter
            if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute)
                    and it.func.attr in ("parameters", "named_parameters") and _self_part(it.func.value, True)):
                continue
            target = loop.target.elts[-1] if isinstance(loop.target, ast.Tuple) and loop.target.elts else loop.target
            if not isinstance(target, ast.Name):
                continue
            for a in of_kind(loop, ast.Assign):
                if isinstance(a.value, ast.Constant) and a.value.value is False and any(
                        isinstance(t, ast.Attribute) and t.attr == "requires_grad"
                        and isinstance(t.value, ast.Name) and t.value.id == target.id for t in a.targets):
                    return "freeze"
        for call in of_kind(node, ast.Call):
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "requires_grad_" and _self_part(func.value, True) \
                    and call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value is False:
                return "freeze"
        return ""

    def nn_module_class(self, func: ast.AST) -> bool:
        """A torch.nn class with parameters (not a loss, not the wrappers)."""
        qualified = self.qualified(func) or ""
        last = qualified.rsplit(".", 1)[-1]
        return qualified.startswith("torch.nn.") and last[:1].isupper() and not last.endswith("Loss") \
            and qualified not in (names.DDP, names.DATA_PARALLEL)

    def sampler_switch(self, node: ast.AST) -> str:
        """The ``sampler_switch`` of FunctionFacts: every return hands back
        ``DataLoader(..., sampler=s)`` (or a name bound to it) where ``s`` is a
        ``DistributedSampler(...)`` only in the arm of ``if <param>:`` (``== True``,
        ``is True``) and None otherwise; the param defaults to False or None."""
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
        defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
        returns = self.returns[-1]
        if not returns or not any(isinstance(d, ast.Constant) and d.value in (False, None) for d in defaults.values()):
            return ""
        samplers = set()
        for value in returns:
            values = self.values_of(value.id) if isinstance(value, ast.Name) else [value]
            calls = [v for v in values if isinstance(v, ast.Call) and self.qualified(v.func) == names.DATALOADER]
            if not values or len(calls) != len(values):
                return ""
            for call in calls:
                keyword = next((k for k in call.keywords if k.arg == "sampler"), None)
                if keyword is None or not isinstance(keyword.value, ast.Name) \
                        or any(k.arg in (None, "batch_sampler") for k in call.keywords):
                    return ""
                samplers.add(keyword.value.id)
        if len(samplers) != 1:
            return ""
        sampler = samplers.pop()
        for branch in (n for n in self.subtrees.under(node) if type(n) is ast.If):
            flag = _switch_param(branch.test)
            default = defaults.get(flag or "")
            if not (isinstance(default, ast.Constant) and default.value in (False, None)):
                continue
            if _binds_call_to(branch.body, sampler, self, names.DISTRIBUTED_SAMPLER) \
                    and _binds_none_to(branch.orelse, sampler):
                return flag
        return ""

    def returns_rank_test(self, node: ast.AST, lenient: bool = False) -> bool:
        returns = self.returns[-1]
        real = [r for r in returns if not (isinstance(r, ast.Constant) and isinstance(r.value, bool))]
        return bool(real) and all(self.rank_test(r, lenient=lenient) for r in real)

    # ------------------------------------------------------------------ expressions
    def expressions(self, roots: Iterable[ast.AST]) -> None:
        of_kind = self.subtrees.of_kind
        for root in roots:
            for node in of_kind(root, ast.Call):
                self.call(node)

    def assignments(self, node: ast.AST) -> list:
        """The ``=`` and annotated assignments at or below ``node``, in source order."""
        found = self.subtrees.of_kind(node, ast.Assign) + self.subtrees.of_kind(node, ast.AnnAssign)
        if found and found[-1].__class__ is ast.AnnAssign and len(found) > 1:
            position = self.subtrees.position
            found.sort(key=lambda child: position[id(child)])
        return found

    def call(self, node: ast.Call) -> None:
        facts, function = self.facts, self.function
        qualified = self.qualified(node.func) or ""
        dotted = _dotted(node.func) or ""
        if qualified == "importlib.import_module" and node.args:
            pattern = _import_pattern(node.args[0])
            if pattern is not None:
                facts.dynamic_imports.append(pattern)
            elif isinstance(node.args[0], (ast.Name, ast.Attribute, ast.Subscript)):
                # A name picked at run time from the module's own table (a registry
                # ``{"wrf": ("pkg.trainers.trainerWRF", "TrainerWRF")}``): its dotted literals.
                for text in self.module_paths():
                    if text not in facts.dynamic_imports:
                        facts.dynamic_imports.append(text)
        method = dotted.split(".")[-1] if dotted else (
            node.func.attr if isinstance(node.func, ast.Attribute) else "")
        if qualified in (names.INIT_PROCESS_GROUP, names.DDP, names.FSDP, names.FULLY_SHARD,
                         names.DISTRIBUTED_SAMPLER):
            facts.own_ddp_context = True  # (a DistributedSampler too: RULES.md, Clarifications)
            facts.wraps_models |= qualified in (names.DDP, names.FSDP, names.FULLY_SHARD)
            if qualified == names.INIT_PROCESS_GROUP and function is not None:
                function.inits_process_group = True
        if qualified in COLLECTIVES or qualified in COLLECTIVE_STATE_DICT or qualified == names.DDP:
            # (Building a DDP model is collective: it checks parameter shapes across
            # ranks and broadcasts rank 0's parameters.)
            # Only collectives every caller's rank reaches: rank-guarded ones (the
            # ``if rank != 0: barrier()`` ... ``if rank == 0: barrier()`` idiom) are
            # judged where they are.
            needs = tuple(self.param_flags) + self.expression_flags.get(id(node), ())
            if function is not None and not self.guards and needs:
                function.collective_flags += tuple(f for f in needs if f not in function.collective_flags)
            elif function is not None and not self.guards and not self.opaque:
                function.collective = True
        if qualified == names.TORCH_SAVE and function is not None and not self.in_memory(node):
            trains = self.trains()  # (the rule asks it of every saving function)
            saved = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "obj"), None)
            params = self.saved_params(saved) if saved is not None else set()
            function.saves |= params
            target = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "f"), None)
            if not self.main_guards and not self.maybe_guards and not function.rank_zero_only \
                    and not self.per_rank_path(target) and not self.single_arms:  # (not the ``else`` of ``if ddp:``)
                # A save in a loop of its function, or in a function that trains (the epoch loop of
                # ``main(cfg, gpu, save_dir)``), is that function's own save, reported there.
                unguarded = params | self.path_params(target) if not self.loops and not trains else set()
                state = saved is not None and not self.own_scalar_state(saved) and (_holds_model_state(saved) or any(
                    _holds_model_state(value) for value in (self.values_of(saved.id) if isinstance(saved, ast.Name)
                                                            else ())))
                if self.flag_guards:
                    function.saves_flagged.append((tuple(self.flag_guards), unguarded, state))
                else:
                    function.saves_unguarded |= unguarded
                    function.saves_state |= state
                    self.unguarded_saves.append(set(self.given))
        if qualified == names.TORCH_SAVE:
            target = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "f"),
                                                                    None)
            text = _path_text(target) if target is not None else None
            if text is None and isinstance(target, ast.Name):  # ``save_pth = osp.join(d, "model_final.pth")``
                text = next((t for t in map(_path_text, self.values_of(target.id)) if t), None)
            if text:
                facts.saved_paths.append(text)
                saved = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "obj"), None)
                if saved is not None and self.saved_on_cpu(saved, node):
                    facts.cpu_saved_paths.append(text)
        if qualified in COLLECTIVES and node.args and isinstance(node.args[0], ast.Attribute) \
                and node.args[0].attr == "grad":
            facts.reduces_gradients = True
        if qualified in _AGREEING_COLLECTIVES and node.args and isinstance(node.args[0], ast.Name):
            self.agreed[-1].add(node.args[0].id)
        if (method == "add_argument" or isinstance(node.func, ast.Name) and any(
                isinstance(v, ast.Attribute) and v.attr == "add_argument" for v in self.values_of(node.func.id))) \
                and any(
                isinstance(a, ast.Constant) and a.value in ("--local_rank", "--local-rank") for a in node.args):
            facts.adds_local_rank_flag = True
        if "set_epoch" in method and not (function is not None and function.name.split(".")[-1] == "set_epoch"):
            # (a ``set_epoch`` method handing the epoch to its inner sampler is a relay, not a caller)
            facts.calls_set_epoch = True
            if function is not None:
                function.calls_set_epoch = True
        if qualified == names.DESTROY_PROCESS_GROUP or method == "destroy_process_group":
            if function is None:
                facts.destroys_process_group = True
            else:
                facts.destroy_functions.append(function.name)
        if method:
            facts.call_names.add(method)
        if self.class_ref(node.func):
            # ``Dist(..., master=(rank == 0))``: a constructor keyword holding a rank test is a
            # rank flag of the built object (``if not ddp.master: return``), as an assigned one is
            flags = facts.attribute_flags
            for keyword in node.keywords:
                if keyword.arg is not None and (keyword.arg in flags or _is_rank_test_shape(keyword.value)):
                    flags[keyword.arg] = flags.get(keyword.arg, True) and self.rank_flag_value(keyword.value)
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(arg, (ast.Name, ast.Attribute)):
                facts.call_names.add(arg.id if isinstance(arg, ast.Name) else arg.attr)
        if qualified == names.SET_DEVICE or method == "set_device":
            facts.calls_set_device = True
            if function is not None:
                function.sets_device = True
            else:
                self.module_sets_device = True
        if function is not None and function.params:
            for used in _device_operands(node, qualified, method):
                if isinstance(used, ast.Name) and used.id in function.params:
                    function.device_params.add(used.id)
                elif isinstance(used, ast.Attribute) and _dotted(used) is not None:
                    # ``args.gpu = gpu`` ... ``torch.cuda.set_device(args.gpu)``
                    for value in self.assigned[-1].get(_dotted(used), ()):
                        if isinstance(value, ast.Name) and value.id in function.params:
                            function.device_params.add(value.id)
        if self.mentions_local_rank and method in (
                "set_device", "cuda", "to", "device", "DistributedDataParallel", "DDP") and \
                any(self.local_rank_flag_in(a) for a in [*node.args, *[k.value for k in node.keywords]]):
            # ... also through a name bound from it: ``gpu = self.cfg.local_rank; set_device(gpu)``;
            # a variable merely called ``local_rank`` (``local_rank = dist.get_rank()``) is no flag
            facts.local_rank_attr_as_device = True
        if function is not None:
            if isinstance(node.func, ast.Name) and node.func.id in function.params:
                if not any(isinstance(v, ast.Attribute) and v.attr == "module" and isinstance(v.value, ast.Name)
                           and v.value.id == node.func.id for v in self.assigned[-1].get(node.func.id, ())):
                    # (not after ``if is_distributed: model = model.module``: the forward of
                    # the unwrapped module starts no collective; a100 Semantic-Segmentation)
                    function.forwards.add(node.func.id)
            elif isinstance(node.func, ast.Name) and node.func.id not in self.assigned[-1]:
                function.forwards_globals.add(node.func.id)
            elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id == "self" and self.self_class \
                    and node.func.attr not in self.class_methods.get(self.self_class, ()):
                function.forwards_attributes.add(node.func.attr)
            elif isinstance(node.func, ast.Name) and self.self_class:
                # ``model = self.model_ema if "ema" in mode else self.model`` then ``model(x)``
                for value in self.assigned[-1].get(node.func.id, ()):
                    function.forwards_attributes.update(
                        attribute for attribute in _self_attributes(value)
                        if attribute not in self.class_methods.get(self.self_class, ()))
            if method == "load_state_dict" and isinstance(node.func, ast.Attribute):
                root = _dotted(node.func.value) or ""
                head = root.split(".")[0]
                if head in function.params and root in (head, head + ".module") and all(
                        _derived_from(value, head) for value in self.assigned[-1].get(head, ())):
                    # (not ``if model is None: model = DiT(...)`` then ``model.load_state_dict(...)``:
                    # a model of its own, not the caller's)
                    function.loads.add(head)
        if method in _SPAWNERS:
            self.spawned(node)
        bound = self.bound_callee(node.func)
        if bound:
            self.record_call(node, bound, instance=True)
        elif dotted and not qualified.startswith(LIBRARY_PREFIXES):
            self.record_call(node, dotted)
            for target in self.function_aliases(node.func):
                self.record_call(node, target)

    def local_rank_flag_in(self, arg: ast.AST) -> bool:
        """Does a device argument read the parsed ``--local_rank`` flag, also through a
        name (or a list indexed: ``device_ids[0]``) bound from it in this function?"""
        assigned = self.assigned[-1]
        imported = self.facts.imports
        if _reads_local_rank_attr(arg, assigned, imported):
            return True
        holder = _unsubscripted(arg)
        return isinstance(holder, (ast.Name, ast.Attribute)) and any(
            _reads_local_rank_attr(value, assigned, imported) for value in assigned.get(_dotted(holder) or "", ()))

    def is_loader_name(self, name: str) -> bool:
        """A name every binding of which is a ``DataLoader(...)`` call (``dl = torch.utils.data.DataLoader(...)``)."""
        values = self.values_of(name)
        return bool(values) and all(isinstance(v, ast.Call) and (_dotted(v.func) or "").endswith("DataLoader")
                                    for v in values)

    def function_aliases(self, func: ast.AST) -> list[str]:
        """``get_loader = dist_loader if cuda else cpu_loader`` then ``get_loader(...)``:
        the functions a local name was bound to (each arm of a conditional), as
        written; [] when a binding is anything else (a call's result, a lambda)."""
        if not isinstance(func, ast.Name):
            return []
        found: list[str] = []
        values = self.values_of(func.id)
        registries = {_dotted(v.value) if isinstance(v, ast.Subscript) else None for v in values}
        if values and None not in registries and len(registries) == 1:
            # ``training_func = PIPELINE_DICT[cfg.trainer.training_func]`` then ``training_func(...)``
            registry = registries.pop()
            return [] if (self.qualified(values[0].value) or "").startswith(LIBRARY_PREFIXES) \
                else [registry + REGISTRY_CALL]
        for value in values:
            arms = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
            for arm in arms:
                target = _dotted(arm) if isinstance(arm, (ast.Name, ast.Attribute)) else None
                if target is None or target == func.id:
                    return []
                if target not in found and not (self.qualified(arm) or "").startswith(LIBRARY_PREFIXES):
                    found.append(target)
        return found[:4]

    def trains(self) -> bool:
        """FunctionFacts.trains of the function being read, worked out once."""
        function = self.function
        if function is not None and function.trains is None:
            function.trains = _has_training_loop(self.function_node)
        return bool(function is not None and function.trains)

    def given_by(self, test: ast.AST, truth: bool) -> list[str]:
        """Parameters (default None) that the arm of ``test`` taken when it is
        ``truth`` needs passed: ``if model is not None:`` / ``if model:`` (body),
        ``if model is None: ... else:`` (else), also one side of an ``and``."""
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and truth:
            return [name for value in test.values for name in self.given_by(value, True)]
        if isinstance(test, ast.Name) and test.id in self.none_defaults:
            return [test.id] if truth else []
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) \
                and test.left.id in self.none_defaults and isinstance(test.comparators[0], ast.Constant) \
                and test.comparators[0].value is None:
            if isinstance(test.ops[0], ast.IsNot):
                return [test.left.id] if truth else []
            if isinstance(test.ops[0], ast.Is):
                return [] if truth else [test.left.id]
        return []

    def reads_flag_parameter(self, test: ast.AST) -> bool:
        """Does an ``if`` test read a parameter of the function that is not a
        "distributed or not" flag (``do_broadcast``, ``use_fsdp_eval``)? Then the
        caller decides whether the branch runs."""
        function = self.function
        if function is None:
            return False
        return any(name in function.params and name not in ("self", "cls")
                   and not any(word in name.lower() for word in _DISTRIBUTION_WORDS)
                   for name in _bare_names(test))

    def saved_params(self, expr: ast.AST, depth: int = 0) -> set[str]:
        """The function's parameters whose value ``expr`` (a saved object) holds:
        the parameter itself, a value of a dict / list / ``dict(...)`` display, a
        local name bound to one; "*" for ``*args``."""
        function = self.function
        if function is None or depth > 3:
            return set()
        if isinstance(expr, ast.Starred):
            return {"*"} if isinstance(expr.value, ast.Name) and expr.value.id not in function.params else set()
        if isinstance(expr, ast.Name):
            if expr.id in function.params:
                return {expr.id}
            found: set[str] = set()
            for value in self.values_of(expr.id):
                found |= self.saved_params(value, depth + 1)
            return found
        parts: list[ast.AST] = []
        if isinstance(expr, ast.Dict):
            parts = [v for v in expr.values if v is not None]
        elif isinstance(expr, (ast.List, ast.Tuple)):
            parts = list(expr.elts)
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("dict", "OrderedDict"):
            parts = [*expr.args, *(k.value for k in expr.keywords)]
        found = set()
        for part in parts:
            found |= self.saved_params(part, depth + 1)
        return found

    def in_memory(self, node: ast.Call) -> bool:
        """``torch.save(x, buffer)`` into an ``io.BytesIO()``: not a file."""
        target = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "f"), None)
        if target is None:
            return False
        values = [target, *(self.values_of(target.id) if isinstance(target, ast.Name) else [])]
        return any("BytesIO" in (_dotted(v.func) or "") for v in values if isinstance(v, ast.Call))

    def per_rank_path(self, expr: Optional[ast.AST], depth: int = 0) -> bool:
        """A file name built from the rank (``f"ckpt_{rank}.pt"``, ``dist.get_rank()``,
        also one binding deep): each rank writes its own file."""
        if expr is None or depth > 3:
            return False
        for node in _walk(expr):
            name = _dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
            if name is not None and any(_PER_RANK_PART.search(part) for part in name.split(".")):
                return True
            if isinstance(node, ast.Name) and any(self.per_rank_path(v, depth + 1) for v in self.values_of(node.id)):
                return True
        return False

    def path_params(self, expr: Optional[ast.AST], depth: int = 0) -> set[str]:
        """The function's parameters a save path is built from (``path``,
        ``os.path.join(out_dir, name)``, ``f"{prefix}.pt"``)."""
        function = self.function
        if expr is None or function is None or depth > 2:
            return set()
        found: set[str] = set()
        for name in _bare_names(expr):
            if name in function.params:
                found.add(name)
            elif name in self.assigned[-1]:
                for value in self.values_of(name):
                    found |= self.path_params(value, depth + 1)
        return found

    def spawned(self, node: ast.Call) -> None:
        """``mp.spawn(worker, ...)`` / ``Process(target=worker)``: the worker runs on every rank."""
        candidates = [node.args[0]] if node.args else []
        candidates += [k.value for k in node.keywords if k.arg in ("fn", "target", "entrypoint")]
        for candidate in candidates:
            bound = self.bound_callee(candidate, called=False)
            dotted = _dotted(candidate) or ""
            if isinstance(candidate, ast.Name) or bound:
                self.facts.calls.append(CallFact(bound or candidate.id, self.caller(), False, False,
                                                 self.spawned_arguments(node), instance=bool(bound)))
            elif "." in dotted and dotted.split(".")[0] in self.facts.imports:  # ``mp.spawn(loader.worker, ...)``
                self.facts.calls.append(CallFact(dotted, self.caller(), False, False, self.spawned_arguments(node)))

    def spawned_arguments(self, node: ast.Call) -> dict[str, str]:
        """What the worker's parameters receive: ``mp.spawn(fn, args=(a, b))`` calls
        ``fn(index, a, b)``; ``Process(target=fn, args=(a, b))`` calls ``fn(a, b)``."""
        method = (_dotted(node.func) or "").split(".")[-1]
        first = 1 if method in ("spawn", "start_processes") else 0
        slots = {"0": SPAWN_INDEX} if first else {}
        args = next((k.value for k in node.keywords if k.arg == "args"), None)
        if args is None and method in ("spawn", "start_processes") and len(node.args) > 1:
            args = node.args[1]
        if isinstance(args, ast.Tuple):
            for position, element in enumerate(args.elts):
                tag = self.arg_tag(element)
                if tag:
                    slots[str(first + position)] = tag
        return slots

    def caller(self) -> str:
        return self.function.name if self.function is not None else ""

    # ------------------------------------------------------------------ instances
    def bound_callee(self, func: ast.AST, called: bool = True) -> str:
        """"Cls.method" when ``func`` is a method of an instance of a class named
        in this module: ``self.m`` (the enclosing class), ``obj.m`` / ``self.x.m``
        with ``obj = Cls(...)`` / ``self.x = Cls(...)``, ``Cls(...).m``; and, for a
        called instance (``obj(...)``), "Cls.__call__". "" otherwise."""
        if isinstance(func, ast.Attribute):
            holder = self.instance_class(func.value)
            if holder:
                return f"{holder}.{func.attr}"
            base = self.super_class(func.value)
            if base:  # ``super().__init__(config, device)``: the first base's method
                return f"{base}.{func.attr}"
            if isinstance(func.value, ast.Name) and func.value.id in ("self", "cls") and self.self_class \
                    and func.attr not in self.attributes.get(self.self_class, {}):
                return f"{self.self_class}.{func.attr}"
            factory = self.factory_of(func.value)
            if factory:
                return f"{factory}{FACTORY_CALL}{func.attr}"
        holder = self.instance_class(func) if called else ""
        return f"{holder}.__call__" if holder else ""

    def constructor_attributes(self) -> tuple[str, ...]:
        """"self.X" for the attributes the enclosing class stores from a constructor
        parameter (``self.dist = dist`` in ``__init__``): a flag its callers choose."""
        stored = self.facts.attribute_params.get(self.self_class, {}) if self.self_class else {}
        return tuple(f"self.{name}" for name, (method, _) in stored.items() if method == "__init__")

    def super_class(self, expr: ast.AST) -> str:
        """``super()`` / ``super(Cls, self)`` in a method of a class: its first base as written."""
        if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "super"
                and self.self_class):
            return ""
        bases = self.facts.classes.get(self.self_class) or ()
        return bases[0] if bases else ""

    def instance_class(self, expr: ast.AST, depth: int = 0) -> str:
        """The class (as written) of the instance ``expr`` holds, or ""."""
        if isinstance(expr, ast.Call):
            return self.class_ref(expr.func)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            return self.attributes.get(self.self_class, {}).get(expr.attr, "")
        if isinstance(expr, ast.Name) and expr.id not in ("self", "cls") and depth < 2:
            refs = {self.instance_class(value, depth + 1) for value in self.values_of(expr.id)}
            return refs.pop() if len(refs) == 1 else ""
        return ""

    def own_scalar_state(self, saved: ast.AST) -> bool:
        """``self.state_dict()`` of a class whose own ``state_dict`` returns plain values."""
        return isinstance(saved, ast.Call) and _dotted(saved.func) == "self.state_dict" \
            and self.self_class in self.scalar_state_classes

    def arrays_of(self, node: ast.ClassDef) -> frozenset[str]:
        """The instance attributes every assignment of which in the class builds a numpy
        array (``self.sum = np.zeros(n)``): ``self.sum[i] += val[i]`` stores a number, never a
        tensor's graph (a102 SUEF's AverageMeterDDP)."""
        values: dict[str, list[ast.AST]] = {}
        for child in self.subtrees.of_kind(node, ast.Assign):
            for target in child.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == "self":
                    values.setdefault(target.attr, []).append(child.value)
        return frozenset(name for name, assigned in values.items() if all(
            isinstance(v, ast.Call) and (self.qualified(v.func) or "").startswith("numpy.") for v in assigned))

    def reads_rank_and_world(self, node: ast.ClassDef) -> bool:
        """ModuleFacts.rank_sharding_classes: the class's code asks torch.distributed
        for both the rank and the world size."""
        qualified = [self.qualified(call.func) or "" for call in self.subtrees.of_kind(node, ast.Call)]
        asked = {name.rsplit(".", 1)[-1] for name in qualified if name.startswith("torch.distributed.")}
        return {"get_rank", "get_world_size"} <= asked

    def instance_classes(self, expr: ast.AST) -> set[str]:
        """The classes the instance ``expr`` may hold: ``instance_class``, or for a
        name rebound through several classes (``dataset = DataList(files)`` then
        ``dataset = Processor(dataset, f)``) each of them; empty when one binding
        is no instance of a class named here."""
        if isinstance(expr, ast.Name) and expr.id not in ("self", "cls"):
            refs = {self.instance_class(value, 1) for value in self.values_of(expr.id)}
            return set() if not refs or "" in refs else refs
        found = self.instance_class(expr)
        return {found} if found else set()

    def factory_of(self, expr: ast.AST) -> str:
        """``build_trainer`` when the name ``expr`` holds what a call of a possible
        project function returns (``trainer = build_trainer(args)``): the join
        reads that function's ``returns_classes``. "" otherwise (also for a call
        itself, ``AutoModel.from_pretrained(p).to(d)``: nearly always a library's)."""
        values = self.values_of(expr.id) if isinstance(expr, ast.Name) and expr.id not in ("self", "cls") else []
        callees = {_dotted(value.func) if isinstance(value, ast.Call) else None for value in values}
        if len(callees) != 1:
            return ""
        callee = callees.pop()
        if callee is None or callee.split(".")[-1][:1].isupper() or not self.may_be_project_callee(callee) \
                or (self.qualified(values[0].func) or "").startswith(LIBRARY_PREFIXES):
            return ""
        return callee

    def class_ref(self, func: ast.AST) -> str:
        """``Trainer`` / ``engine.Trainer`` when ``func`` may name a project class
        (CapWords, not a library's); the join decides whether it is one."""
        dotted = _dotted(func)
        if dotted is None or not dotted.split(".")[-1][:1].isupper():
            return ""
        if isinstance(func, ast.Name):
            # ``Exp = Exp_Long_Term_Forecast`` (a class chosen by a flag) then ``Exp(args)``
            aliased = {_dotted(value) for value in self.values_of(func.id)}
            if len(aliased) == 1 and None not in aliased and next(iter(aliased)).split(".")[-1][:1].isupper():
                dotted = aliased.pop()
        return "" if (self.qualified(func) or "").startswith(LIBRARY_PREFIXES) else dotted

    def record_call(self, node: ast.Call, dotted: str, instance: bool = False) -> None:
        strict = any(self.main_guards)
        lenient = bool(self.main_guards)
        slots: dict[str, str] = {}
        for position, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                break
            tag = self.arg_tag(arg)
            if tag:
                slots[str(position)] = tag
        for keyword in node.keywords:
            if keyword.arg is not None:
                tag = self.arg_tag(keyword.value)
                if tag:
                    slots[keyword.arg] = tag
        for keyword in node.keywords:
            if keyword.arg is None:
                for name, tag in self.spread_slots(keyword.value).items():
                    slots.setdefault(name, tag)
        self.attribute_rank_slots(node, slots)
        for position, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                break
            if isinstance(arg, ast.Name) and arg.id not in ("self", "cls"):
                self.handed[-1].setdefault(arg.id, []).append(f"{dotted}@{position}")
        starred = any(isinstance(arg, ast.Starred) for arg in node.args) or any(k.arg is None for k in node.keywords)
        needs = tuple(self.param_flags) + self.expression_flags.get(id(node), ())
        false_slots = tuple(str(i) for i, a in enumerate(node.args) if _false_or_none(a)) + tuple(
            k.arg for k in node.keywords if k.arg is not None and _false_or_none(k.value))
        self.facts.calls.append(CallFact(dotted, self.caller(), strict, lenient, slots,
                                         tuple(self.maybe_guards) + tuple(FLAG_PREFIX + a for a in self.flag_guards),
                                         instance, self.no_grad > 0,
                                         None if starred else len(node.args),
                                         tuple(k.arg for k in node.keywords if k.arg is not None),
                                         self.single_arms > 0, needs, false_slots))

    def spread_slots(self, expr: ast.AST) -> dict[str, str]:
        """The keyword slots a ``**kwargs`` argument fills, where the screen can tell:
        a dict display bound to the name (``system = {"classifier": ddp_model, ...}``), or
        the dict display a function of this module returns (``system = setup(rank, cfg)``
        then ``training_loop(rank, **config, **system)``; a61 pytorch_ddp_resnet)."""
        values = self.values_of(expr.id) if isinstance(expr, ast.Name) else [expr]
        if len(values) != 1:
            return {}
        value = values[0]
        if isinstance(value, ast.Dict):
            return {key.value: tag for key, item in zip(value.keys, value.values)
                    if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.isidentifier()
                    and (tag := self.arg_tag(item))}
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            function = self.facts.functions.get(value.func.id)
            if function is not None:
                return {key: kind for key, kind in function.returns_wrapped.items() if key.isidentifier()}
        return {}

    def attribute_rank_slots(self, node: ast.Call, slots: dict[str, str]) -> None:
        """``train(CFG)`` after ``CFG.rank = int(os.environ["RANK"])``: slot "0.rank"
        (or "cfg.rank" for a keyword) holds the rank the object carries in that
        attribute, so ``config.rank`` inside ``train(config)`` is known (DDP017)."""
        arguments = [(str(i), a) for i, a in enumerate(node.args) if not isinstance(a, ast.Starred)]
        arguments += [(k.arg, k.value) for k in node.keywords if k.arg is not None]
        for slot, arg in arguments:
            if not isinstance(arg, ast.Name) or arg.id in ("self", "cls"):
                continue
            if self.handed[-1].get(arg.id):
                # ``init_distributed_mode(args); train(args)``: any attribute ``train`` reads
                # may be one the earlier callees set (the join names it: Project._slot_tag)
                slots[f"{slot}.*"] = f"{SET_BY_CALLEE_PREFIX}*:" + "|".join(self.handed[-1][arg.id])
            prefix = arg.id + "."
            attributes = {name[len(prefix):] for scope in self.assigned for name in scope
                          if name.startswith(prefix) and "." not in name[len(prefix):]}
            for attribute in attributes:
                tag = _one_tag(self.value_tags(ast.Attribute(value=arg, attr=attribute)))
                if tag in (GLOBAL_RANK, LOCAL_RANK, SPAWN_INDEX) or (
                        tag.startswith(PARAM_PREFIX) and RANK_NAME.match(attribute)):
                    # (``args.rank = rank`` of ``def main(rank, args)`` that mp.spawn runs: the
                    # join follows the parameter to the spawn index)
                    slots[f"{slot}.{attribute}"] = tag
                else:  # rebound here: not what the caller's own parameter carried (Project._slot_tag)
                    slots[f"{slot}.{attribute}"] = UNKNOWN

    def wrapped_attribute(self, expr: ast.AST) -> str:
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            return self.facts.wrapped_attributes.get(self.self_class, {}).get(expr.attr, "")
        return ""

    def arg_tag(self, expr: ast.AST) -> str:
        """What an argument passes (the vocabulary at the top of this module):
        a wrapped model, a rank, a device, the caller's parameter ("param:NAME"),
        or "" when the screen cannot tell."""
        wrapped = self.wrapper_of(expr) or self.wrapped_attribute(expr)
        if wrapped:
            return wrapped
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str) and expr.value not in ("cuda", "cpu") \
                and _WORD.match(expr.value):
            return STRING_PREFIX + expr.value  # ``Loader(cfg, "train")``: which branch the callee takes
        if isinstance(expr, ast.Name):
            for value in self.values_of(expr.id):
                wrapped = self.wrapper_of(value)
                if wrapped:
                    return wrapped
        held = self.dict_entry(expr)
        if held is not None:
            return self.arg_tag(held)  # ``state["model"]`` with ``state = {"model": model, ...}``
        found = _one_tag(self.value_tags(expr)) or self.return_tag(expr)
        if not found and isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) \
                and expr.value.id == "self" and expr.attr in self.facts.attribute_params.get(self.self_class, {}):
            return f"{SELF_ATTRIBUTE_PREFIX}{self.self_class}.{expr.attr}"
        return found

    def dict_entry(self, expr: ast.AST) -> Optional[ast.AST]:
        """The value a dict display bound to the name holds under the literal key
        (``state["model"]`` after ``state = {"model": model, ...}``), when the name
        has that one binding."""
        if not (isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name)
                and isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, str)):
            return None
        values = self.values_of(expr.value.id)
        if len(values) != 1 or not isinstance(values[0], ast.Dict):
            return None
        for key, value in zip(values[0].keys, values[0].values):
            if isinstance(key, ast.Constant) and key.value == expr.slice.value:
                return value
        return None

    def may_be_project_callee(self, callee: str) -> bool:
        """An imported name, or a function or class this module defined so far."""
        head = callee.split(".")[0]
        return head in self.facts.imports or head in self.facts.functions or head in self.facts.classes

    def return_tag(self, expr: ast.AST) -> str:
        """RETURN_PREFIX tag for a name bound only to what one call of a possible
        project function returns (``dis = setup(dis)``, ``g, d = setup(g, d)``)."""
        if not isinstance(expr, ast.Name):
            return ""
        found = [(value, "") for value in self.values_of(expr.id)]
        for scope in reversed(self.unpacked):
            if expr.id in scope:
                found += scope[expr.id]
                break
        tags = set()  # as for wraps, one binding that may hand back a wrapped model decides
        for value, item in found:
            callee = _dotted(value.func) if isinstance(value, ast.Call) else None
            if callee is not None and self.may_be_project_callee(callee) \
                    and not (self.qualified(value.func) or "").startswith(LIBRARY_PREFIXES):
                tags.add(f"{RETURN_PREFIX}{callee}:{item}")
        return "|".join(sorted(tags))  # ``m = build(cfg); m = wrap(m)``: the join tries each

    # ------------------------------------------------------------------ values
    def value_tags(self, expr: ast.AST, depth: int = 0) -> set[str]:
        """The kinds of value ``expr`` may hold, over every binding of a name
        ("" for a value the screen cannot tell)."""
        if depth > 4:
            return {""}
        if isinstance(expr, ast.Constant):
            if type(expr.value) is int:
                return {LITERAL}
            if expr.value is True:
                return {TRUE}
            if expr.value == "cpu":
                return set()  # the other arm of ``"cuda" if ok else "cpu"`` decides
            return {CUDA_DEVICE} if expr.value == "cuda" else {""}
        if isinstance(expr, ast.IfExp):
            arms = self.value_tags(expr.body, depth + 1) | self.value_tags(expr.orelse, depth + 1)
            return arms
        if isinstance(expr, (ast.Compare, ast.BoolOp, ast.UnaryOp)) and self.rank_test(expr, lenient=True):
            return {RANK_FLAG}  # ``FLAGS.verbose = dist.get_rank() == 0``, passed on as a flag
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod) and self.counts_devices(expr.right):
            return {LOCAL_RANK}  # ``rank % torch.cuda.device_count()``
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add) \
                and (_counts_nodes(expr.left) or _counts_nodes(expr.right)):
            return {GLOBAL_RANK}  # ``args.node_rank * args.gpus + gpu`` (values.rank_sources; a109 MVSFormer)
        key = self.env_key(expr)
        if key is not None:
            return {GLOBAL_RANK if key in _GLOBAL_RANK_VARIABLES else LOCAL_RANK if key in _LOCAL_RANK_VARIABLES
                    else ""}
        if isinstance(expr, ast.Call):
            return self.call_value_tags(expr, depth)
        dotted = _dotted(expr)
        values = self.values_of(dotted) if dotted is not None else []
        if values:
            found: set[str] = set()
            for value in values:
                found |= self.value_tags(value, depth + 1)
            return found
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) \
                and self.handed[-1].get(expr.value.id):
            # Before the attribute's name: ``init_distributed_mode(args)`` may have set
            # ``args.local_rank = int(os.environ["RANK"])`` (a111 DUSTGaussian); the join
            # falls back to the parsed flag when no callee sets it.
            return {f"{SET_BY_CALLEE_PREFIX}{expr.attr}:" + "|".join(self.handed[-1][expr.value.id])}
        if isinstance(expr, ast.Attribute) and expr.attr == "local_rank" \
                and not (isinstance(expr.value, ast.Name) and "." not in self.facts.imports.get(expr.value.id, ".")):
            return {LOCAL_RANK_ATTRIBUTE}
        if isinstance(expr, ast.Name) and self.function is not None and expr.id in self.function.params:
            return {PARAM_PREFIX + expr.id}
        return {""}

    def call_value_tags(self, call: ast.Call, depth: int) -> set[str]:
        if isinstance(call.func, ast.Name) and call.func.id in ("int", "str") and call.args:
            return self.value_tags(call.args[0], depth + 1)
        qualified = self.qualified(call.func) or ""
        last = (_dotted(call.func) or "").split(".")[-1]
        if qualified == "torch.device" and call.args and len(call.args) + len(call.keywords) == 1:
            return self.value_tags(call.args[0], depth + 1) & {CUDA_DEVICE} or {""}
        if last in ("get_rank", "get_global_rank", "get_world_rank") and not call.args:
            return {GLOBAL_RANK}  # with a group argument: the rank inside a subgroup
        if last in ("get_local_rank", "get_node_local_rank"):
            return {LOCAL_RANK}
        return {""}

    def counts_devices(self, expr: ast.AST, depth: int = 0) -> bool:
        """``torch.cuda.device_count()``, or a name bound from it (``ngpus``)."""
        if isinstance(expr, ast.Call):
            return self.qualified(expr.func) == "torch.cuda.device_count"
        values = self.values_of(expr.id) if isinstance(expr, ast.Name) and depth < 3 else []
        return bool(values) and all(self.counts_devices(v, depth + 1) for v in values)

    def is_environ(self, expr: ast.AST, depth: int = 0) -> bool:
        """``os.environ``, or a copy of it (``dict(os.environ)``, ``os.environ.copy()``,
        ``{k: os.environ[k] for k in keys}``), also through a name."""
        if depth > 3:
            return False
        if self.qualified(expr) == "os.environ":
            return True
        if isinstance(expr, ast.Call):
            if isinstance(expr.func, ast.Name) and expr.func.id == "dict" and expr.args:
                return self.is_environ(expr.args[0], depth + 1)
            return isinstance(expr.func, ast.Attribute) and expr.func.attr == "copy" \
                and self.is_environ(expr.func.value, depth + 1)
        if isinstance(expr, ast.DictComp):
            item = expr.value
            return (isinstance(item, ast.Subscript) and self.is_environ(item.value, depth + 1)) or (
                isinstance(item, ast.Call) and self.qualified(item.func) in _ENVIRON_GETTERS)
        if isinstance(expr, ast.Name):
            values = self.values_of(expr.id)
            return bool(values) and all(self.is_environ(v, depth + 1) for v in values)
        return False

    def wrapper_class(self, annotation: ast.AST) -> str:
        """"ddp"/"fsdp" for an annotation naming the wrapper class."""
        qualified = self.qualified(annotation)
        return DDP_MODEL if qualified == names.DDP else FSDP_MODEL if qualified == names.FSDP else ""

    def wrapper_of(self, expr: ast.AST) -> str:
        if isinstance(expr, ast.IfExp):  # ``FSDP(model) if is_distributed else model.to(rank)``: may be wrapped
            return self.wrapper_of(expr.body) or self.wrapper_of(expr.orelse)
        if isinstance(expr, ast.Call):
            qualified = self.qualified(expr.func)
            if qualified == names.DDP:
                return DDP_MODEL
            if qualified == names.FSDP:
                return FSDP_MODEL
        return ""


_SANITISERS = ("item", "detach", "tolist", "numpy", "cpu_numpy")


_HISTORY_KEEPING_METHODS = ("clone", "to", "cuda", "cpu", "float", "double", "half", "view", "reshape",
                            "contiguous", "mean", "sum", "div", "div_", "mul", "mul_", "add", "add_")



def _import_pattern(expr: ast.AST) -> Optional[str]:
    """The module name ``import_module`` is given, with "*" for each formatted
    part (``f"pkg.trainers.{name}_trainer"`` -> "pkg.trainers.*_trainer"); None
    unless it names a family of modules: a literal affix in the formatted part
    ("*_trainer") or a package two parts deep ("pkg.tokenizers.*"), not any
    module of a top-level package (``f"diffusers.{name}"``: an introspection helper)."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        text = expr.value
    elif isinstance(expr, ast.JoinedStr):
        pieces = []
        for value in expr.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                pieces.append(value.value.replace("*", ""))
            else:
                pieces.append("*")
        text = "".join(pieces)
    else:
        return None
    head = text.split("*", 1)[0]
    if not text or text.startswith(".") or ("*" in text and "." not in head):
        return None
    parts = text.split(".")
    if not all(part and all(c.isalnum() or c in "_*" for c in part) for part in parts):
        return None
    starred = [i for i, part in enumerate(parts) if "*" in part]
    if starred and parts[starred[0]] == "*" and starred[0] < 2:
        return None
    return text

def _same_length_tuples(target: ast.AST, value: ast.AST) -> bool:
    """``a, b = x, y``: a tuple (or list) target and value of the same length, no starred item."""
    kinds = (ast.Tuple, ast.List)
    return isinstance(target, kinds) and isinstance(value, kinds) and len(target.elts) == len(value.elts) \
        and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts))


def _reads_raw(expr: ast.AST, name: str) -> bool:
    """Does ``expr`` read ``name`` other than through ``.item()``, ``.detach()``,
    ``float(...)`` and friends?"""
    if isinstance(expr, ast.Name):
        return expr.id == name
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in _SANITISERS:
            return False
        if isinstance(func, ast.Name) and func.id in ("float", "int", "bool", "len", "str", "round"):
            return False
    if isinstance(expr, ast.Attribute) and expr.attr in ("data", "shape", "grad", "dtype", "device"):
        return False
    return any(_reads_raw(child, name) for child in _iter_child_nodes(expr))


def _element_of(target: ast.AST, arrays: frozenset[str]) -> bool:
    """``self.sum[i]`` with ``sum`` one of ``arrays``."""
    return isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute) \
        and isinstance(target.value.value, ast.Name) and target.value.value.id == "self" \
        and target.value.attr in arrays


def _on_self(target: ast.AST) -> bool:
    while isinstance(target, (ast.Subscript, ast.Attribute)):
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
            return True
        target = target.value
    return False


def _path_text(expr: ast.AST) -> Optional[str]:
    """The literal text of a file path: a string, an f-string ("{}" for each
    placeholder), ``os.path.join`` of such parts ("/"-joined); None otherwise."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
                       for v in expr.values)
    if isinstance(expr, ast.Call) and _dotted(expr.func) in ("os.path.join", "osp.join") and expr.args:
        parts = [_path_text(a) for a in expr.args]
        return "/".join(p if p is not None else "{}" for p in parts)
    return None


def _cuda_string_index(expr: Optional[ast.AST]) -> Optional[ast.AST]:
    """``i`` of ``"cuda:%d" % i``, ``"cuda:{}".format(i)``, ``"cuda:" + str(i)``
    (mirror of ``ddplint.analysis.values.cuda_index_strings``)."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.left, ast.Constant) and isinstance(expr.left.value, str):
        text = expr.left.value
        if isinstance(expr.op, ast.Mod) and text in ("cuda:%d", "cuda:%s"):
            return expr.right
        if isinstance(expr.op, ast.Add) and text == "cuda:":
            right = expr.right
            if isinstance(right, ast.Call) and isinstance(right.func, ast.Name) and right.func.id == "str" \
                    and len(right.args) == 1:
                return right.args[0]
            return right
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "format" \
            and isinstance(expr.func.value, ast.Constant) and expr.func.value.value in ("cuda:{}", "cuda:{0}") \
            and len(expr.args) == 1:
        return expr.args[0]
    return None


def _device_operands(node: ast.Call, qualified: str, method: str) -> Iterable[ast.AST]:
    """The expressions a call uses as a CUDA device or device index (mirror of
    ``ddplint.analysis.values.device_arguments``), unwrapped from ``int(...)``
    and ``f"cuda:{...}"``."""
    picked: list[ast.AST] = []
    keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
    if qualified == names.TORCH_DEVICE:
        picked.append(node.args[1] if len(node.args) > 1 else keywords.get("index"))
        picked.append(node.args[0] if node.args else keywords.get("type"))
    elif qualified == names.SET_DEVICE or method in ("set_device", "cuda", "to"):
        picked.append(node.args[0] if node.args else keywords.get("device"))
    elif qualified == names.DDP:
        ids = keywords.get("device_ids")
        if isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) == 1:
            picked.append(ids.elts[0])
        picked.append(keywords.get("output_device"))
    elif qualified in (names.FSDP, names.INIT_PROCESS_GROUP):
        picked.append(keywords.get("device_id"))
    for expr in picked:
        expr = _cuda_string_index(expr) or expr
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("int", "str") \
                and expr.args:
            expr = expr.args[0]
        if isinstance(expr, ast.JoinedStr) and len(expr.values) == 2 and isinstance(expr.values[0], ast.Constant) \
                and expr.values[0].value == "cuda:" and isinstance(expr.values[1], ast.FormattedValue):
            expr = expr.values[1].value
        if expr is not None:
            yield expr
# Parts of identifiers that hold a per-process value (mirror of DDP011's test).
_PER_RANK_PART = re.compile(r"(^|_)(rank|gpu|gpu_id|device_id|proc|proc_id|process_id|process_index|worker|"
                            r"worker_id|shard|shard_id|node_id)(_|$)|rank$", re.IGNORECASE)


def _text_of(expr: ast.AST) -> str:
    """The words ``ast.dump(expr)`` holds that matter to a word search: names,
    attributes, keyword and parameter names, string constants (cheaper than
    dumping the tree)."""
    words = []
    for node in _walk(expr):
        kind = type(node)
        if kind is ast.Name:
            words.append(node.id)
        elif kind is ast.Attribute:
            words.append(node.attr)
        elif kind is ast.Constant:
            words.append(repr(node.value))
        elif kind is ast.keyword and node.arg:
            words.append(node.arg)
        elif kind is ast.arg:
            words.append(node.arg)
    return " ".join(words)


def _bare_names(expr: ast.AST) -> list[str]:
    """Names read as a whole (``path``, ``out_dir`` in ``os.path.join(out_dir, f)``),
    not through an attribute (``args`` in ``args.output_dir`` is a configuration
    the function reads, not a file its caller chose)."""
    found, stack = [], [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name):
            found.append(node.id)
        elif isinstance(node, ast.Attribute):
            continue
        else:
            stack.extend(_iter_child_nodes(node))
    return found


_STATE_WORDS = ("model", "net", "ckpt", "checkpoint", "state", "optim", "weights", "snapshot")


_MODULE_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def _self_attributes(value: ast.AST) -> list[str]:
    """``self.model`` -> ["model"]; both arms of ``self.a if c else self.b``."""
    if isinstance(value, ast.IfExp):
        return _self_attributes(value.body) + _self_attributes(value.orelse)
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
        return [value.attr]
    return []


def _empty_literal(value: ast.AST) -> bool:
    return isinstance(value, ast.Constant) and value.value in (None, False, "", 0) and value.value is not True


def _main_only(test: ast.AST, truth: bool) -> bool:
    """Does ``test`` being ``truth`` leave only the main rank (a rank test the
    caller has recognised)? ``rank == 0`` / ``is_main_process()`` when true,
    ``rank != 0`` / ``not is_main()`` / ``rank > 0`` when false; ``A and B`` true
    when one of them is; ``A or B`` false when one of them is false-main...;
    a rank test of unknown shape counts when true (as every guard did)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _main_only(test.operand, not truth)
    if isinstance(test, ast.BoolOp):
        conjunction = isinstance(test.op, ast.And) == truth  # De Morgan
        results = [_main_only(value, truth) for value in test.values]
        return any(results) if conjunction else all(results) or (truth and any(results))
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        operator, value = test.ops[0], test.comparators[0]
        excludes_main = isinstance(operator, (ast.NotEq, ast.Gt, ast.NotIn)) or (
            isinstance(operator, ast.GtE) and _int(value) == 1)
        return truth != excludes_main
    last = (_dotted(test.func if isinstance(test, ast.Call) else test) or "").split(".")[-1].lower()
    if last and any(word in last for word in _DISTRIBUTION_WORDS) and not names.is_rank_predicate_name(last):
        # ``is_distributed`` false: one process, rank 0 (``if is_distributed and rank != 0: return``);
        # a bare ``args.local_rank`` true: a rank other than 0. By its own name, not its module's
        # (``distributed_utils.is_main_process()`` is a rank test).
        return not truth
    return truth


def _restarts_an_iterator(handler: ast.excepthandler) -> bool:
    """``except StopIteration:`` whose body calls ``iter(...)`` again."""
    caught = handler.type
    kinds = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    if not any(_dotted(kind) == "StopIteration" for kind in kinds if kind is not None):
        return False
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "iter"
               for statement in handler.body for node in ast.walk(statement))


def _iterates_a_loader(body: list[ast.stmt], is_loader_name=None) -> bool:
    """A ``for`` loop over a data loader (``for b in train_loader``,
    ``enumerate(loader)``, ``train_queue``, a name bound to a ``DataLoader(...)``:
    ``for example in dl``) in ``body``, outside nested functions."""
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.For, ast.AsyncFor)) and (any(
                word in ast.dump(node.iter).lower() for word in ("loader", "queue"))
                or (is_loader_name is not None and isinstance(node.iter, ast.Name) and is_loader_name(node.iter.id))):
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def _state_dict_of_plain_values(node: ast.ClassDef) -> bool:
    """The class defines ``state_dict`` and every return of it is a dict display
    whose values call nothing (``{"max_grad_norm": self.max_grad_norm, ...}``)."""
    method = next((m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == "state_dict"), None)
    if method is None:
        return False
    returns = [n for n in ast.walk(method) if isinstance(n, ast.Return)]
    return bool(returns) and all(
        isinstance(r.value, ast.Dict) and None not in r.value.keys
        and not any(isinstance(n, ast.Call) for v in r.value.values for n in ast.walk(v)) for r in returns)


def _holds_model_state(expr: ast.AST) -> bool:
    """A saved object that is model state: a ``state_dict()`` inside, or a name
    that says so (``checkpoint``, ``state``, ``model``)."""
    for node in _walk(expr):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("state_dict", "optim_state_dict"):
            return True
    name = _dotted(expr)
    return name is not None and any(word in name.split(".")[-1].lower() for word in _STATE_WORDS)


def _qualified(facts: ModuleFacts, expr: ast.AST) -> Optional[str]:
    """``expr`` resolved through the module's imports (the judge's
    ``SemanticIndex.qualified_name`` without local aliases): also the
    conventional torch names of a star import (``from utils import *``) and
    ``torch`` when only ``import torch.distributed as dist`` imports it."""
    dotted = _dotted(expr)
    if dotted is None:
        return None
    head, _, rest = dotted.partition(".")
    target = facts.imports.get(head)
    if target is None:
        if facts.star_imports:
            target = names.STAR_IMPORT_CONVENTIONS.get(head)
        elif head == "torch" and any(t.startswith("torch.") for t in facts.imports.values()):
            target = "torch"
        if target is None:
            return None
    return names.canonical(f"{target}.{rest}" if rest else target)


# ---------------------------------------------------------------------- 'module.' prefix strips
@dataclass(slots=True, frozen=True)
class PrefixStrip:
    """Code that removes the 'module.' prefix from the keys of a state dict
    (``{k[7:]: v ...}``, ``k.replace("module.", "")``,
    ``consume_prefix_in_state_dict_if_present``), with what it can tell about
    the checkpoint whose keys it rewrites."""

    source: str  # "load": a torch.load result; "param": a parameter (any caller's dict);
    #              "live": a live model's state_dict(); "unknown"
    path: str = ""  # the file name the load reads, literal parts with '*' for holes ("" unknown)
    path_text: str = ""  # the load's path expression as written (``args.pretrained``)
    keys: tuple[str, ...] = ()  # subscripts read from the loaded dict ("" = the dict itself)
    # strips the wrapper's prefix AND a submodule's ("module.encoder_q."): written for a DDP
    # checkpoint of a model with that submodule, not for downloaded weights
    submodule: bool = False


# Text without which a module strips no 'module.' prefix (keeps the screen cheap).
_STRIP_MARKERS = ("[7:]", "'module", '"module', "consume_prefix", "strip_prefix", "^module", "[1:]")
_STRIP_CALLS = ("replace", "removeprefix", "startswith", "lstrip", "split", "sub", "strip_prefix",
                "consume_prefix_in_state_dict_if_present")
_LOADERS = ("load", "load_file", "load_checkpoint", "load_state_dict_from_url", "load_url")


def prefix_strips(tree: ast.AST, facts: ModuleFacts, subtrees: Optional[Subtrees] = None) -> list[PrefixStrip]:
    """Every 'module.' prefix strip of the module, with the checkpoint it reads."""
    found: list[PrefixStrip] = []
    subtrees = subtrees or Subtrees(tree)
    functions = sorted(subtrees.of_kind(tree, ast.FunctionDef) + subtrees.of_kind(tree, ast.AsyncFunctionDef),
                       key=lambda node: subtrees.position[id(node)])
    for function in [tree, *functions]:
        body = function.body
        params = set()
        if not isinstance(function, ast.Module):
            a = function.args
            params = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
        assigned: dict[str, list[ast.AST]] = {}
        loops: list[tuple[ast.AST, ast.AST, ast.AST]] = []  # (target, iter, owner)
        sites: list[tuple[ast.AST, Optional[ast.AST]]] = []  # (strip node, dict when known)
        deep: set[int] = set()  # strips of "module.<submodule>." (PrefixStrip.submodule)
        built: list[ast.Call] = []  # ``k.replace(prefix + '.', '')``: a prefix the function builds
        for node in _own_nodes(body):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        assigned.setdefault(target.id, []).append(node.value)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                loops.append((node.target, node.iter, node))
            elif isinstance(node, (ast.DictComp, ast.ListComp, ast.SetComp, ast.GeneratorExp)):
                for generator in node.generators:
                    loops.append((generator.target, generator.iter, node))
            elif isinstance(node, ast.Call):
                last = (_qualified(facts, node.func) or _dotted(node.func) or "").split(".")[-1]
                if last in ("consume_prefix_in_state_dict_if_present", "strip_prefix_if_present") and node.args:
                    sites.append((node, node.args[0]))
                elif last in ("replace", "removeprefix") and any(_is_submodule_literal(a) for a in node.args):
                    # (also ``k.replace("module.encoder.", "module.")``: a submodule's weights moved
                    # under the wrapper's prefix, a loader of a DDP model's checkpoint with that submodule)
                    sites.append((node, None))
                    deep.add(id(node))
                elif last in _STRIP_CALLS and any(_is_module_literal(a) for a in node.args):
                    sites.append((node, None))
                elif last in ("replace", "removeprefix") and node.args:
                    built.append(node)  # decided below, once every assignment of the function is known
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) \
                    and (_int(node.slice.lower) == 7 or _module_prefix_length(node.slice.lower)) \
                    and node.slice.upper is None:
                sites.append((node, None))
                if _module_prefix_length(node.slice.lower):
                    deep.add(id(node))
            elif isinstance(node, ast.Subscript) and _drops_first_key_part(node):
                # ``'.'.join(k.split('.')[1:])``: the first dotted part of each key (the wrapper's
                # ``module``) cut off, whatever it is called
                sites.append((node, None))
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and _is_module_literal(node.left) \
                    and isinstance(node.right, ast.Name):
                # ``{'module.' + k: v for k, v in ckpt.items()}``: the loader gives the keys the
                # wrapper's prefix (it loads into a DDP model), reconciling them as a strip does.
                sites.append((node, None))
        for node in built:
            if any(_is_submodule_prefix(a, assigned) for a in node.args):
                sites.append((node, None))
                deep.add(id(node))
        for node, dictionary in sites:
            if isinstance(node, ast.Subscript) and not _slices_a_loop_key(node, loops, subtrees):
                continue  # ``block_type[7:]``: a string cut, not the keys of a state dict (also ``k.split('.')[1:]``)
            if dictionary is None:
                dictionary = _iterated_dict(node, loops, subtrees)
            strip = _strip_of(facts, dictionary, assigned, params)
            if id(node) in deep:
                strip = dataclasses.replace(strip, submodule=True)
            found.append(strip)
    if not found and any(t.endswith("consume_prefix_in_state_dict_if_present") for t in facts.imports.values()):
        found.append(PrefixStrip("unknown"))  # imported, used in a way not seen here (an alias, a callback)
    return found


def _own_nodes(body: list[ast.stmt]):
    """The nodes of a function body, not those of nested functions or classes."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    stack = [node for node in reversed(body) if not isinstance(node, nested)]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in _iter_child_nodes(node) if not isinstance(child, nested))


def _is_module_literal(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Constant) and isinstance(expr.value, str) and expr.value.strip("^\\") in (
        "module.", "module\\.", "module")


def _derived_from(value: ast.AST, name: str) -> bool:
    """Is ``value`` the object ``name`` holds, seen through ``.module``, a move
    (``model.to(dev)``) or a conditional of such (``m.module if ddp else m``)?"""
    if isinstance(value, ast.Name):
        return value.id == name
    if isinstance(value, ast.Attribute):
        return _derived_from(value.value, name)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        return _derived_from(value.func.value, name)
    if isinstance(value, ast.IfExp):
        return _derived_from(value.body, name) and _derived_from(value.orelse, name)
    return False


def _is_rank_test_shape(expr: ast.AST) -> bool:
    """A comparison or boolean expression (what a rank test looks like), not a
    plain value: a keyword first seen with such a value may be a rank flag."""
    return isinstance(expr, (ast.Compare, ast.BoolOp, ast.UnaryOp))


def _is_submodule_literal(expr: ast.AST) -> bool:
    """``"module.encoder_q."``: the wrapper's prefix and a submodule path after it."""
    return isinstance(expr, ast.Constant) and isinstance(expr.value, str) \
        and expr.value.startswith(_WRAPPER_PREFIX) and len(expr.value.rstrip(".")) > len(_WRAPPER_PREFIX)


_WRAPPER_PREFIX = "module."  # a name, not a literal: this module must not look like a loader that strips


def _is_submodule_prefix(expr: ast.AST, assigned: dict, depth: int = 0) -> bool:
    """The wrapper's prefix and a submodule path after it: a literal
    ``"module.encoder_q."``, or built (``model_prefix = 'module.' + args.model_prefix``
    then ``k.replace(model_prefix + '.', '')``, MoCo-style linear evaluation)."""
    if depth > 3:
        return False
    if _is_submodule_literal(expr):
        return True
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        if _is_module_literal(expr.left) and not _is_module_literal(expr.right):
            return True
        return isinstance(expr.right, ast.Constant) and expr.right.value == "." \
            and _is_submodule_prefix(expr.left, assigned, depth + 1)
    if isinstance(expr, ast.Name):
        values = assigned.get(expr.id, ())
        return bool(values) and all(_is_submodule_prefix(v, assigned, depth + 1) for v in values)
    return False


def _module_prefix_length(expr: Optional[ast.AST]) -> bool:
    """``len("module.encoder_q.")``: the length of the wrapper's prefix and a
    submodule path after it (the loader keeps one submodule of a DDP checkpoint)."""
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "len" \
        and len(expr.args) == 1 and isinstance(expr.args[0], ast.Constant) \
        and isinstance(expr.args[0].value, str) and expr.args[0].value.startswith("module.")


def _drops_first_key_part(node: ast.Subscript) -> bool:
    """``k.split('.')[1:]`` (joined again with '.')."""
    value, cut = node.value, node.slice
    return isinstance(cut, ast.Slice) and _int(cut.lower) == 1 and cut.upper is None and cut.step is None \
        and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "split" \
        and len(value.args) == 1 and isinstance(value.args[0], ast.Constant) and value.args[0].value == "." \
        and isinstance(value.func.value, ast.Name)


def _slices_a_loop_key(node: ast.Subscript, loops, subtrees: Subtrees) -> bool:
    """``k[7:]`` (or ``k.split('.')[1:]``) where ``k`` is bound by a loop (or
    comprehension) around it: ``{k[7:]: v for k, v in sd.items()}``."""
    key = node.value.func.value if _drops_first_key_part(node) else node.value
    if not isinstance(key, ast.Name):
        return False
    for target, _, owner in loops:
        if subtrees.contains(owner, node) and any(
                isinstance(n, ast.Name) and n.id == key.id for n in subtrees.under(target)):
            return True
    return False


def _iterated_dict(node: ast.AST, loops, subtrees: Subtrees) -> Optional[ast.AST]:
    """The dict whose keys a loop around ``node`` walks (``for k, v in sd.items()``)."""
    for target, iterable, owner in reversed(loops):
        if not subtrees.contains(owner, node):
            continue
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) \
                and iterable.func.attr in ("items", "keys") and not iterable.args:
            return iterable.func.value
        if isinstance(iterable, (ast.Name, ast.Attribute, ast.Subscript)):
            return iterable
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.args \
                and iterable.func.id in ("list", "sorted", "tuple"):
            inner = iterable.args[0]
            if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) \
                    and inner.func.attr in ("items", "keys"):
                return inner.func.value
            return inner
        return iterable  # ``model.named_parameters()``: not a loaded dict
    return None


def _strip_of(facts: ModuleFacts, expr: Optional[ast.AST], assigned, params, keys: tuple[str, ...] = (),
              depth: int = 0) -> PrefixStrip:
    """Where the dict ``expr`` comes from (the checkpoint it holds)."""
    if expr is None or depth > 5:
        return PrefixStrip("unknown", keys=keys)
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, str):
        return _strip_of(facts, expr.value, assigned, params, keys + (expr.slice.value,), depth + 1)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get" \
            and expr.args and isinstance(expr.args[0], ast.Constant) and isinstance(expr.args[0].value, str):
        return _strip_of(facts, expr.func.value, assigned, params, keys + (expr.args[0].value, ""), depth + 1)
    if isinstance(expr, ast.IfExp):
        body = _strip_of(facts, expr.body, assigned, params, keys, depth + 1)
        orelse = _strip_of(facts, expr.orelse, assigned, params, keys, depth + 1)
        if body.source == orelse.source == "load":
            return PrefixStrip("load", body.path or orelse.path, body.path_text or orelse.path_text,
                               tuple(dict.fromkeys(body.keys + orelse.keys)))
        return body if body.source == "load" else orelse
    if isinstance(expr, ast.Call):
        last = (_dotted(expr.func) or "").split(".")[-1]
        if last in ("state_dict", "named_parameters", "named_modules", "named_buffers", "parameters", "modules"):
            return PrefixStrip("live", keys=keys)
        if last in _LOADERS and (expr.args or expr.keywords):
            path = expr.args[0] if expr.args else expr.keywords[0].value
            return PrefixStrip("load", _path_pattern(path, assigned), _text(path), keys or ("",))
        return PrefixStrip("unknown", keys=keys)
    if isinstance(expr, ast.Name):
        if expr.id in assigned:
            results = [_strip_of(facts, v, assigned, params, keys, depth + 1) for v in assigned[expr.id]]
            loads = [r for r in results if r.source == "load"]
            if len(loads) > 1:  # ``ckpt = torch.load(p)`` then ``if "model" in ckpt: ckpt = ckpt["model"]``
                return PrefixStrip("load", next((r.path for r in loads if r.path), ""),
                                   next((r.path_text for r in loads if r.path_text), ""),
                                   tuple(dict.fromkeys(key for r in loads for key in r.keys)))
            return loads[0] if loads else results[0]
        if expr.id in params:
            return PrefixStrip("param", keys=keys)
    return PrefixStrip("unknown", keys=keys)


def _path_pattern(expr: ast.AST, assigned: dict, depth: int = 0) -> str:
    """The file name a path expression names: literal text, '*' for the holes
    of an f-string; "" when unknown."""
    if depth > 3:
        return ""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value.replace("\\", "/").rsplit("/", 1)[-1]
    if isinstance(expr, ast.JoinedStr):
        text = "".join(v.value if isinstance(v, ast.Constant) else "*" for v in expr.values)
        name = text.rsplit("/", 1)[-1]
        return name if name.strip("*") else ""
    if isinstance(expr, ast.Call) and expr.args and (_dotted(expr.func) or "").endswith("join"):
        return _path_pattern(expr.args[-1], assigned, depth + 1)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Div)):
        return _path_pattern(expr.right, assigned, depth + 1)
    if isinstance(expr, ast.Name) and len(assigned.get(expr.id, ())) == 1:
        return _path_pattern(assigned[expr.id][0], assigned, depth + 1)
    return ""


def _text(expr: ast.AST) -> str:
    try:
        return ast.unparse(expr)[:80]
    except Exception:  # pragma: no cover - unparse handles every expression
        return ""


# nn.Module methods that return the module itself (values.SELF_RETURNING_METHODS, the device/mode ones).
_SELF_RETURNING = ("to", "cuda", "train", "half", "float", "bfloat16")


def _attribute_params(node: ast.ClassDef, subtrees) -> dict[str, tuple[str, str]]:
    """``self.NAME = PARAM`` (also ``PARAM.to(dev)`` / ``PARAM.cuda()``) in the class's methods, PARAM a parameter of the
    method: NAME -> (method, PARAM); a name stored from two places is left out."""
    found: dict[str, tuple[str, str]] = {}
    twice: set[str] = set()
    for method in node.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        params = {a.arg for a in [*method.args.posonlyargs, *method.args.args, *method.args.kwonlyargs]}
        # ``if isinstance(model, DDP): model = model.module`` before ``self.model = model``: what is
        # stored is never the wrapper (a95 dlengine's Checkpointer).
        params -= {child.targets[0].id for child in subtrees.of_kind(method, ast.Assign)
                   if len(child.targets) == 1 and isinstance(child.targets[0], ast.Name)
                   and isinstance(child.value, ast.Attribute) and child.value.attr == "module"
                   and isinstance(child.value.value, ast.Name) and child.value.value.id == child.targets[0].id}
        for child in subtrees.of_kind(method, ast.Assign):
            value = child.value
            # ``self.model = model.to(device=gpu_id)`` / ``.cuda()``: the module itself.
            while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                    and value.func.attr in _SELF_RETURNING:
                value = value.func.value
            if not (isinstance(value, ast.Name) and value.id in params):
                continue
            for target in child.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == "self":
                    if target.attr in found and found[target.attr] != (method.name, value.id):
                        twice.add(target.attr)
                    found.setdefault(target.attr, (method.name, value.id))
    return {name: where for name, where in found.items() if name not in twice}


def _switch_params(test: ast.AST, params: tuple[str, ...]) -> list[str]:
    """The parameters ``test`` needs true: ``reduce``, ``reduce is True``, either side of
    ``reduce and step % k == 0``."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [p for operand in test.values for p in _switch_params(operand, params)]
    name = _switch_param(test) if not isinstance(test, ast.Attribute) else _dotted(test)
    return [name] if name is not None and name in params and name not in ("self", "cls") else []


def _expression_switches(function: ast.AST, params: tuple[str, ...]) -> dict[int, tuple[str, ...]]:
    """Calls in the body of a conditional expression on a parameter (``self._average(loss) if
    reduce else float(loss)``): id(call) -> the parameters they need true."""
    found: dict[int, tuple[str, ...]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.IfExp):
            switches = tuple(_switch_params(node.test, params))
            if switches:
                for inner in ast.walk(node.body):
                    if isinstance(inner, ast.Call):
                        found[id(inner)] = found.get(id(inner), ()) + switches
    return found


def _false_or_none(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Constant) and (expr.value is False or expr.value is None)


def _switch_param(test: ast.AST) -> Optional[str]:
    """``flag`` / ``flag == True`` / ``flag is True``: the flag's name."""
    if isinstance(test, ast.Name):
        return test.id
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)) \
            and isinstance(test.left, ast.Name) and isinstance(test.comparators[0], ast.Constant) \
            and test.comparators[0].value is True:
        return test.left.id
    return None


def _binds_call_to(body: list[ast.stmt], name: str, extractor, qualified: str) -> bool:
    return any(isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
               and s.targets[0].id == name and isinstance(s.value, ast.Call)
               and extractor.qualified(s.value.func) == qualified for s in body)


def _binds_none_to(body: list[ast.stmt], name: str) -> bool:
    return any(isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
               and s.targets[0].id == name and isinstance(s.value, ast.Constant) and s.value.value is None
               for s in body)


def _one_tag(tags: set[str]) -> str:
    """One tag for a value with several possible bindings: a rank is a global
    rank when some binding reads the global rank and none a local rank (and the
    other way round); otherwise the tags must agree."""
    ranks = tags & {GLOBAL_RANK, LOCAL_RANK}
    if len(ranks) == 1:
        return ranks.pop()
    return next(iter(tags)) if len(tags) == 1 else ""


def _derives_from(expr: ast.AST, names_: set[str]) -> bool:
    """Is ``expr`` computed from one of ``names_`` (``t``, ``t.item()``,
    ``t / world_size``, ``float(t)``, ``out[0]``, ``torch.cat(out)``)?"""
    if isinstance(expr, ast.Name):
        return expr.id in names_
    if isinstance(expr, (ast.Attribute, ast.Subscript)):
        return _derives_from(expr.value, names_)
    if isinstance(expr, ast.BinOp):
        return _derives_from(expr.left, names_) or _derives_from(expr.right, names_)
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Attribute) and _derives_from(expr.func.value, names_):
            return True  # a method of the value
        return bool(expr.args) and all(_derives_from(a, names_) for a in expr.args)
    return False


_DISTRIBUTION_WORDS = ("distributed", "is_initialized", "is_available", "world_size", "ddp", "ngpus",
                       "n_gpu", "num_gpus", "multiprocessing", "local_rank", "dist_avail")


def _unsubscripted(expr: ast.AST) -> ast.AST:
    """``device_ids`` for ``device_ids[0]``."""
    return expr.value if isinstance(expr, ast.Subscript) else expr


def _counts_nodes(expr: ast.AST) -> bool:
    """``args.node_rank * ngpus`` or ``args.rank * ngpus_per_node``: one operand of a
    product names the node (``values._counts_nodes`` on the libcst side)."""
    if not (isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult)):
        return False
    lasts = [(_dotted(side) or "").split(".")[-1].lower() for side in (expr.left, expr.right)]
    return any(last in names.NODE_WORDS for last in lasts) or (
        any(RANK_NAME.match(last) for last in lasts) and any("per_node" in last for last in lasts))


def _reads_local_rank_attr(expr: ast.AST, assigned: dict, imported: dict) -> bool:
    """An attribute or key named local_rank (``args.local_rank``, ``cfg["local_rank"]``),
    or a parameter (a name the function never binds) called so, which its callers fill
    (``spmd_main(args.local_world_size, args.local_rank)``): a parsed flag; a variable
    the function binds from something else (``local_rank = dist.get_rank()``) is not,
    nor is an imported module's value (``import idr_torch``; ``idr_torch.local_rank``, a104
    kiwano; ``from option import opt`` imports the options themselves)."""
    return any((type(node) is ast.Attribute and node.attr == "local_rank"
                and not (type(node.value) is ast.Name and "." not in imported.get(node.value.id, ".")))
               or (type(node) is ast.Constant and node.value == "local_rank")
               or (type(node) is ast.Name and node.id == "local_rank" and "local_rank" not in assigned)
               for node in _walk(expr))


def _is_distribution_test(test: ast.AST) -> bool:
    """``if dist.is_initialized():``, ``if world_size > 1:``, ``if args.distributed:``:
    the same on every rank of one run."""
    text = _text_of(test).lower()
    return any(word in text for word in _DISTRIBUTION_WORDS)


_DISTRIBUTED_SWITCH = re.compile(r"distributed|(^|_)(ddp|multi_?gpu|multiprocess)($|_)", re.IGNORECASE)


def _single_process_arm(test: ast.AST, truth: bool) -> bool:
    """Does the arm (``truth``: the body, else the ``else``) run only in a
    single-process run? ``if args.local_rank == -1:``, ``if not args.distributed:``,
    the ``else`` of ``if dist.is_initialized():`` / ``if args.local_rank != -1:``."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _single_process_arm(test.operand, not truth)
    if isinstance(test, ast.BoolOp):
        # ``args.save_model and not is_distributed``: the body needs every operand, so one
        # single-process operand makes it single-process; the ``else`` of an ``or`` likewise.
        if truth == isinstance(test.op, ast.And):
            return any(_single_process_arm(operand, truth) for operand in test.values)
        return all(_single_process_arm(operand, truth) for operand in test.values)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and _int(test.comparators[0]) == -1 \
            and RANK_NAME.match((_dotted(test.left) or "").split(".")[-1]):
        return isinstance(test.ops[0], ast.Eq) == truth and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
    if isinstance(test, ast.Call) and (_dotted(test.func) or "").endswith("dist.is_initialized"):
        return not truth
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and _PROCESS_COUNT.search(
            (_dotted(test.left) or "").split(".")[-1]):
        # ``ngpus_per_node > 1`` / ``world_size == 1`` (mirror of roles._comparison_polarity)
        operator, value = type(test.ops[0]), _int(test.comparators[0])
        if (operator, value) in ((ast.Gt, 1), (ast.GtE, 2), (ast.NotEq, 1)):
            return not truth
        if (operator, value) in ((ast.Eq, 1), (ast.LtE, 1), (ast.Lt, 2)):
            return truth
        return False
    dotted = _dotted(test)
    return dotted is not None and not truth and bool(_DISTRIBUTED_SWITCH.search(dotted.split(".")[-1]))


_PROCESS_COUNT = re.compile(r"^(world_?size|n_?gpus|num_?gpus|ngpus_per_node|gpus_per_node|n_?procs|nprocs|"
                            r"num_?processes|device_count)$", re.IGNORECASE)


def _is_distributed_flag_test(test: ast.Compare) -> bool:
    """Mirror of ddplint.analysis.ranks._is_distributed_flag_test."""
    if len(test.ops) != 1:
        return False
    operator, value = test.ops[0], test.comparators[0]
    if isinstance(value, ast.Constant) and value.value is None:
        return isinstance(operator, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq))
    if _int(value) == -1:
        return isinstance(operator, (ast.Eq, ast.NotEq, ast.Gt, ast.LtE))
    return _int(value) == 0 and isinstance(operator, (ast.GtE, ast.Lt))


def _rank_zero_decorators() -> tuple[str, ...]:
    return RANK_ZERO_DECORATORS


def rank_gate_decorators(tree: ast.AST) -> tuple[str, ...]:
    """The names of this module's decorators (functions or methods) that call
    the function they wrap only under a rank test (``def _parallel_mask(func):
    def inner(self, *a): if self.rank_id == 0: return func(self, *a)``):
    what they decorate runs on that rank only, as with ``@rank_zero_only``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.args.args:
            continue
        wrapped = node.args.args[0].arg
        inner = [d for d in node.body if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))]
        returned = {r.value.id for r in node.body if isinstance(r, ast.Return) and isinstance(r.value, ast.Name)}
        for candidate in inner:
            if candidate.name not in returned:
                continue
            calls = [c for c in ast.walk(candidate) if isinstance(c, ast.Call)
                     and isinstance(c.func, ast.Name) and c.func.id == wrapped]
            gated = [branch for branch in ast.walk(candidate) if isinstance(branch, ast.If)
                     and _tests_a_rank(branch.test) and any(c in ast.walk(branch) for c in calls)
                     and not any(c in ast.walk(e) for e in branch.orelse for c in calls)]
            if calls and gated and all(any(c in ast.walk(b) for b in gated) for c in calls):
                found.append(node.name)
    return tuple(found)


def _tests_a_rank(test: ast.AST) -> bool:
    """A comparison of something named like a rank with 0 (``self.rank_id == 0``,
    ``dist.get_rank() == 0``)."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, *test.comparators]
    if not any(isinstance(side, ast.Constant) and side.value == 0 for side in sides):
        return False
    for side in sides:
        text = _dotted(side.func if isinstance(side, ast.Call) else side) or ""
        if text and (RANK_NAME.match(text.split(".")[-1]) or "rank" in text.split(".")[-1].lower()):
            return True
    return False


def _always_exits(body: list[ast.stmt]) -> bool:
    if not body:
        return False
    last = body[-1]
    if isinstance(last, (ast.Return, ast.Continue, ast.Raise, ast.Break)):
        return True
    return isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and \
        _dotted(last.value.func) in ("sys.exit", "exit", "os._exit")


def _exit_attributes(test: ast.AST) -> list[str]:
    """The attributes that are true after ``if <test>: return``: ``if not
    self.is_master: return``, ``if not cfg.save or epoch % 5: return``."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _tested_attributes(test.operand)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return [name for value in test.values for name in _exit_attributes(value)]
    return []


def _tested_attributes(test: ast.AST) -> list[str]:
    """The attributes an ``if`` test requires to be true: ``if args.should_save:``,
    ``if opt.log and epoch % 5 == 0:`` (not under ``not`` nor one arm of ``or``)."""
    if isinstance(test, ast.Attribute) and _dotted(test) is not None:
        return [test.attr]
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.IsNot, ast.NotEq)) \
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
        return _tested_attributes(test.left)  # ``if cfg.ckpt_dir is not None:``
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [name for value in test.values for name in _tested_attributes(value)]
    return []
