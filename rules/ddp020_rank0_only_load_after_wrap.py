"""## What it does
Flags `load_state_dict(...)` on a model that is already wrapped in DDP (the
wrapper, its `.module`, an alias such as `inner = ddp.module`, or the inner model
passed to `DDP(...)`) when it runs only under a rank condition, with no broadcast
of the parameters afterwards; also a rank-guarded call of a function that loads
into the DDP model (a project function given the model, or a loader method of
the same class: `if self.rank == 0: self.load_checkpoint(path)`). An FSDP model
the same (my reading of the rule's intent: a load on rank 0 after the wrap
changes rank 0's shards only).

Not flagged: loading on every rank; loading before wrapping; a load followed by
a broadcast of the parameters (`dist.broadcast(p.data, 0)` over
`model.parameters()`, `broadcast_object_list([model.state_dict()])`,
Horovod's `broadcast_parameters`; a broadcast of counters such as the epoch does
not count); `if is_main_process:` without a call (always true); a rank test that
also encloses the wrap (every rank that owns the model loads); a function that
only single-process scripts of the project call (every known call is in an
inference or benchmark script outside the DDP context).

## Why is this bad?
DDP broadcasts rank 0's parameters once, in its constructor. Weights loaded into
rank 0 afterwards stay on rank 0: the other ranks keep their random
initialisation, gradients are averaged across different models, and training
silently diverges (evaluation on rank 0 looks fine).

## Example
    model = DDP(model, device_ids=[local_rank])
    if rank == 0:
        model.module.load_state_dict(torch.load(path, map_location="cpu"))

## Use instead
    model.load_state_dict(torch.load(path, map_location="cpu"))   # every rank loads
    model = DDP(model, device_ids=[local_rank])

## References
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
- https://pytorch.org/docs/stable/notes/ddp.html
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ddplint import names
from ddplint.analysis.flow import calls_in_function, helper_functions
from ddplint.analysis.models import guard_encloses_wrap, project_callee, project_of, wrapped_root
from ddplint.screen.facts import COLLECTIVES
from ddplint.analysis.ranks import guard_restricts, rank_guards
from ddplint.analysis.roles import run_by_single_process_scripts_only
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import CallSite, SemanticIndex

IMPORTS = ("import torch\nimport torch.distributed as dist\n"
           "from torch.nn.parallel import DistributedDataParallel as DDP\n")
_BROADCASTS = tuple(q for q in COLLECTIVES if "broadcast" in q)
# FSDP too: a load on rank 0 after the wrap changes rank 0's shards only (a94 fsdp-for-transformer).
_WRAPPERS = (names.DDP, names.FSDP)


class Rank0OnlyLoadAfterWrap(Rule):
    code, name, severity = "DDP020", "rank0-only-load-after-wrap", "error"
    message = "weights loaded on some ranks only after the DDP/FSDP wrap: the ranks silently diverge"
    # The load may sit in another module; the report is then at a rank-guarded call here.
    triggers = ("if",)
    needs_ddp_context = True
    uses_project = True

    valid = [
        Valid(IMPORTS + "model = DDP(net)\nmodel.load_state_dict(sd)\n"),
        Valid(IMPORTS + "if rank == 0:\n    net.load_state_dict(sd)\nmodel = DDP(net)\n"),
        Valid(IMPORTS + "model = DDP(net)\nif rank == 0:\n    model.module.load_state_dict(sd)\n"
                        "for p in model.parameters():\n    dist.broadcast(p.data, src=0)\n"),
        Valid(IMPORTS + "model = DDP(net)\nif rank == 0:\n    optimizer.load_state_dict(sd)\n"),
        Valid(IMPORTS + "model = DDP(net)\nif args.local_rank != -1:\n    model.load_state_dict(sd)\n"),
        Valid(IMPORTS + "model = DDP(net)\nif rank == 0:\n    ema.load_state_dict(sd)\n"),
        Valid(IMPORTS + "def load(m, p):\n    m.load_state_dict(torch.load(p))\n"
                        "if rank == 0:\n    load(net, path)\nmodel = DDP(net)\n"),
        Valid(IMPORTS + "model = DDP(net)\nif rank == 0:\n    eval_model = Net()\n"
                        "    eval_model.load_state_dict(model.module.state_dict())\n"),
        # A function object is always true: every rank loads (RULES.md, Clarifications).
        Valid(IMPORTS + "from utils import is_main_process\nmodel = DDP(net)\nif is_main_process:\n"
                        "    model.load_state_dict(sd)\n"),
        Valid(IMPORTS + "def is_main_process():\n    return dist.get_rank() == 0\nmodel = DDP(net)\n"
                        "if is_main_process:\n    model.module.load_state_dict(sd)\n"),
        # A role guard around the wrap and the load: every rank that owns the model loads.
        Valid(IMPORTS + "if rank in learner_ranks:\n    model = DDP(net, process_group=learners)\n"
                        "    if args.resume:\n        model.load_state_dict(torch.load(args.resume))\n"),
        Valid(IMPORTS + "def main(rank):\n    if rank != 0:\n        model = DDP(net)\n"
                        "        model.module.load_state_dict(sd)\n"),
        # The parameters are broadcast from rank 0 afterwards.
        Valid(IMPORTS + "model = DDP(net)\nif rank == 0:\n    model.load_state_dict(sd)\n"
                        "dist.broadcast_object_list([model.state_dict()], src=0)\n"),
        Valid(IMPORTS + "class T:\n    def __init__(self):\n        self.model = DDP(net)\n"
                        "    def load(self, path):\n        self.model.load_state_dict(torch.load(path))\n"
                        "    def setup(self):\n        self.load(self.path)\n"),
        # Unwrapped, loaded on rank 0, wrapped again: the new DDP broadcasts rank 0's weights (a73 HVDv1).
        Valid(IMPORTS + "def main(args, net, best):\n    model = DDP(net, device_ids=[args.local_rank])\n"
                        "    train(model)\n    model = model.module\n    if args.local_rank == 0:\n"
                        "        model.load_state_dict(torch.load(best, map_location='cpu'))\n"
                        "    model = DDP(model, device_ids=[args.local_rank])\n    evaluate(model)\n"),
        # The helper loads weights only into a model of its own (``if model is None:``); the DDP model
        # handed to it on rank 0 is only sampled from (a65 reflow).
        Valid(IMPORTS + "def sample(model=None, model_path=None):\n    if model is None:\n"
                        "        model = Net()\n        model.load_state_dict(torch.load(model_path, map_location='cpu'))\n"
                        "    return model(torch.randn(8, 3))\n"
                        "model = DDP(net)\nfor epoch in range(100):\n    train(model)\n"
                        "    if epoch % 50 == 0 and rank == 0:\n        sample(model=model)\n"),
    ]
    invalid = [
        Invalid(IMPORTS + "model = DDP(net)\nif rank == 0:\n    model.load_state_dict(sd)\n",
                line=6, column=5),
        # ... and a re-wrap that only rank 0 makes broadcasts nothing to the others.
        Invalid(IMPORTS + "def main(args, net, best):\n    model = DDP(net, device_ids=[args.local_rank])\n"
                          "    train(model)\n    if args.local_rank == 0:\n        model = model.module\n"
                          "        model.load_state_dict(torch.load(best, map_location='cpu'))\n"
                          "        model = DDP(model, device_ids=[args.local_rank])\n    evaluate(model)\n",
                line=9, column=9),
        # An FSDP model loaded on the main worker only, after the wrap (a94 fsdp-for-transformer).
        Invalid("import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
                "def main(args, net, rank):\n    model = FSDP(net, device_id=rank)\n"
                "    if args.load_model and rank == 0:\n"
                "        model.load_state_dict(torch.load(args.path, map_location='cpu'))\n"
                "    train(model)\n", line=6, column=9),
        # A helper whose rank test reads the rank its caller passes.
        Invalid(IMPORTS + "def load_model_checkpoint(model, rank, output_dir):\n    if rank != 0:\n        return model\n"
                          "    model.load_state_dict(torch.load(output_dir + '/model.pt', map_location='cpu'))\n"
                          "    return model\n"
                          "def main(args, net):\n    model = DDP(net)\n"
                          "    model = load_model_checkpoint(model, dist.get_rank(), args.output_dir)\n    train(model)\n",
                line=7, column=5),
        # The global rank spelled out as ``node * gpus + local_rank`` (a91 zarzen).
        Invalid(IMPORTS + "def main(args, net, path):\n    model = DDP(net.cuda(), device_ids=[args.local_rank])\n"
                          "    if args.world_id * args.num_gpu + args.local_rank == 0:\n"
                          "        model.load_state_dict(torch.load(path, map_location='cpu')['model'])\n"
                          "    train(model)\n", line=7, column=9),
        # The final evaluation of a script loads the best weights on rank 0 only: flagged all the same
        # (the blind labeller of a56 sewformer; the ranks' models differ from then on).
        Invalid(IMPORTS + "model = DDP(net)\ntrain(model, loader)\nif rank == 0:\n"
                          "    model.load_state_dict(torch.load('best.pth')['model'])\n"
                          "    metrics = evaluate(model, test_loader, rank)\n", line=7, column=5),
        # Evaluated on rank 0, then trained on: the ranks train different models.
        Invalid(IMPORTS + "model = DDP(net)\nif rank == 0:\n    model.load_state_dict(sd)\n"
                          "    print(evaluate(model, val_loader))\ntrain(model, loader)\n",
                line=6, column=5),
        Invalid(IMPORTS + "model = DDP(net)\nif dist.get_rank() == 0:\n    model.module.load_state_dict(sd)\n",
                line=6, column=5),
        Invalid(IMPORTS + "ddp = DDP(net, device_ids=[local_rank])\nif local_rank == 0:\n"
                          "    net.load_state_dict(torch.load(path, map_location='cpu'))\n", line=6, column=5),
        Invalid(IMPORTS + "def resume(model, path):\n    model.load_state_dict(torch.load(path))\n"
                          "model = DDP(net)\nif is_main_process():\n    resume(model, path)\n",
                line=8, column=5),
        Invalid(IMPORTS + "class T:\n    def setup(self):\n        self.model = DDP(self.net)\n"
                          "        if self.rank == 0:\n            self.model.load_state_dict(self.sd)\n",
                line=8, column=13),
        Invalid(IMPORTS + "def main():\n    model = DDP(net)\n    if args.rank % ngpus == 0 and args.resume:\n"
                          "        model.load_state_dict(torch.load(args.resume)['model'])\n",
                line=7, column=9),
        Invalid(IMPORTS + "model = DDP(net)\nif not is_master():\n    pass\nelse:\n"
                          "    model.module.encoder.load_state_dict(sd)\n", line=8, column=5),
        Invalid(IMPORTS + "def load(rank, model):\n    if rank != 0:\n        return\n"
                          "    model.load_state_dict(sd)\nload(rank, DDP(net))\n", line=7, column=5),
        # Through an alias of the inner model.
        Invalid(IMPORTS + "model = DDP(net)\ninner = model.module\nif rank == 0:\n"
                          "    inner.load_state_dict(sd)\n", line=7, column=5),
        # Through a loader method of the same class.
        Invalid(IMPORTS + "class T:\n    def __init__(self, net):\n        self.model = DDP(net)\n"
                          "    def load_checkpoint(self, path):\n"
                          "        self.model.module.load_state_dict(torch.load(path))\n"
                          "    def setup(self):\n        if self.rank == 0:\n"
                          "            self.load_checkpoint(self.path)\n", line=11, column=13),
        # Through a loader object of another class (``store.restore(inner)``).
        Invalid(IMPORTS + "class Store:\n    def restore(self, path, model):\n"
                          "        model.load_state_dict(torch.load(path, map_location='cpu'))\n"
                          "store = Store()\nddp = DDP(net)\ninner = ddp.module\nif rank == 0:\n"
                          "    store.restore(path, inner)\n", line=11, column=5),
        # A later broadcast of counters is not a parameter resync.
        Invalid(IMPORTS + "model = DDP(net)\nif rank == 0:\n    model.load_state_dict(sd['model'])\n"
                          "start = torch.tensor([sd['epoch']])\ndist.broadcast(start, src=0)\n",
                line=6, column=5),
        Invalid(IMPORTS + "from utils import is_first_worker\nmodel = DDP(net)\nif is_first_worker():\n"
                          "    model.load_state_dict(sd)\n", line=7, column=5),
    ]

    def screen(self, sketch):
        """The screen: a DDP wrap here (or a model wrapped elsewhere), a rank
        test (or a project rank predicate) and a load_state_dict (or a call of
        a project load helper)."""
        kinds = ()
        if not sketch.may_call("torch.nn.parallel.DistributedDataParallel"):
            kinds += ("wrapped",)
        if not sketch.rankish():
            kinds += ("rank_predicate",)
        if "load_state_dict" not in sketch.calls:
            kinds += ("loads",)
        return kinds or True

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        project = project_of(index)
        for site in index.calls:
            if site.method == "load_state_dict" and site.receiver is not None:
                if wrapped_root(index, site.receiver, site.order, _WRAPPERS) is None:
                    continue
            elif not _local_helper_loads(index, site):
                callee = project_callee(index, site.node)
                key = project.loading_function(index.path, callee, index.imports) if callee else None
                if key is None or not any(project.call_loads_into(key, callee, slot)
                                          for slot in _model_slots(index, site)):
                    continue
            guards = [g for g in rank_guards(index, site.node) if guard_restricts(index, g)
                      and not guard_encloses_wrap(index, g, site.node)]
            if guards and not _broadcast_after(index, site) and not run_by_single_process_scripts_only(index, site.node):
                yield self.report(site.node)



def _model_slots(index: SemanticIndex, site: CallSite) -> list[str]:
    """Argument slots that carry the DDP model or the model inside it (the
    wrapper, ``ddp.module``, ``inner = ddp.module``, the model passed to ``DDP``)."""
    slots, position = [], 0
    for arg in site.node.args:
        if arg.star:
            break
        slot = arg.keyword.value if arg.keyword is not None else str(position)
        position += arg.keyword is None
        if wrapped_root(index, arg.value, site.order, _WRAPPERS) is not None:
            slots.append(slot)
    return slots


def _local_helper_loads(index: SemanticIndex, site: CallSite, depth: int = 0) -> bool:
    """A call of a function of this module (``resume()``, ``self.load_checkpoint(p)``)
    whose body loads weights into a model already wrapped there (``self.model``
    set to ``DDP(...)`` in ``__init__``, a module-level DDP model)."""
    if depth > 2:
        return False
    return any(_helper_loads(index, helper, depth) for helper in helper_functions(index, site))


def _helper_loads(index: SemanticIndex, helper, depth: int) -> bool:
    key = ("ddp020.loads", id(helper))
    if key not in index.cache:
        index.cache[key] = False  # recursion guard
        index.cache[key] = _body_loads(index, helper, depth)
    return index.cache[key]


def _body_loads(index: SemanticIndex, helper, depth: int) -> bool:
    for inner in calls_in_function(index, helper):
        if inner.method == "load_state_dict" and inner.receiver is not None:
            root = wrapped_root(index, inner.receiver, inner.order, _WRAPPERS)
            # A parameter is what the caller passes (the project's slots decide).
            if root is not None and ("." in root or not any(
                    b.kind == "param" for b in index.reaching(root, inner.receiver))):
                return True
        elif _local_helper_loads(index, inner, depth + 1):
            return True
    return False


# Calls that re-broadcast a model's parameters from rank 0 (torch, Horovod, FSDP).
_RESYNC_METHODS = ("_sync_params", "sync_params", "broadcast_params", "broadcast_parameters",
                   "_sync_module_states", "sync_module_states", "_sync_params_and_buffers")
_PARAMETER_WORDS = ("param", "weight", "state_dict", "buffer", ".data", "module")


def _broadcast_after(index: SemanticIndex, site: CallSite) -> bool:
    """A later broadcast of the parameters (not of counters such as the epoch),
    or a new DDP wrap of the model in the same function: DDP's constructor
    broadcasts rank 0's weights (``model = model.module``, the rank-0 load, then
    ``model = DDP(model, ...)`` again)."""
    if any(o.order > site.order for o in index.method_calls(*_RESYNC_METHODS)):
        return True
    if any(wrap.order > site.order and wrap.scope is site.scope and not rank_guards(index, wrap.node)
           for wrap in index.calls_to(names.DDP)):
        return True
    return any(other.order > site.order and other.scope is site.scope and _broadcasts_parameters(index, other)
               for other in index.calls_to(*_BROADCASTS))


def _broadcasts_parameters(index: SemanticIndex, site: CallSite) -> bool:
    """``dist.broadcast(p.data, 0)`` in ``for p in model.parameters():``,
    ``broadcast_object_list([model.state_dict()])``: the payload is the weights."""
    texts = [index.module.code_for_node(arg.value) for arg in site.node.args[:1]]
    loop = index.enclosing(site.node, cst.For)
    if loop is not None:
        texts.append(index.module.code_for_node(loop.iter))
    text = " ".join(texts).lower()
    return any(word in text for word in _PARAMETER_WORDS)
