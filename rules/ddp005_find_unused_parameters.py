"""## What it does
Flags `DistributedDataParallel(..., find_unused_parameters=True)` (and accelerate's
`DistributedDataParallelKwargs(find_unused_parameters=True)`) written with a literal
`True`; also a project subclass of DDP that keeps DDP's constructor
(`class _DDP(DistributedDataParallel)` adding only `forward` or `__getattr__`,
here or in another module of the project).

## Why is this bad?
With the flag on, DDP traverses the autograd graph from the outputs after every
forward pass to find parameters that will not receive a gradient, and marks them
ready early. That traversal costs time on every step, even when every parameter is
used, and it also hides real bugs (a branch that silently never trains).
Turn it on only for models whose forward genuinely skips parameters.

Not flagged: a non-literal value (`find_unused_parameters=args.unused`); a
project subclass with its own `__init__` (it decides what reaches DDP); a
`**kwargs` that may carry it; unit tests (`test_*.py`, `*_test.py`, `tests/`),
where the flag is what the test checks, not a cost paid over a training run.

## Example
    model = DDP(model, device_ids=[local_rank], find_unused_parameters=True)

## Use instead
    model = DDP(model, device_ids=[local_rank])
    # If DDP then complains about unused parameters, find them with
    # TORCH_DISTRIBUTED_DEBUG=INFO and fix the model, or keep the flag knowingly.

## References
- https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
- https://pytorch.org/docs/stable/notes/ddp.html
"""

from ddplint import names
from ddplint.analysis.models import wrapper_subclass
from ddplint.analysis.values import is_test_module, literal_bool
from ddplint.rule import Invalid, Rule, Valid

DDP_IMPORT = "from torch.nn.parallel import DistributedDataParallel as DDP\n"


class FindUnusedParameters(Rule):
    code, name, severity = "DDP005", "find-unused-parameters", "info"
    # A project subclass of DDP may be imported from another module.
    uses_project = True
    message = "find_unused_parameters=True makes DDP traverse the autograd graph after every forward"
    # The keyword may be passed by position, so the class name is the trigger.
    triggers = ("DistributedDataParallel", "find_unused_parameters")

    valid = [
        Valid(DDP_IMPORT + "model = DDP(model, find_unused_parameters=args.find_unused)\n"),
        Valid(DDP_IMPORT + "model = DDP(model, find_unused_parameters=False)\n"),
        Valid(DDP_IMPORT + "model = DDP(model, device_ids=[local_rank])\n"),
        Valid(DDP_IMPORT + "ddp_kwargs = dict(find_unused_parameters=True)\nmodel = DDP(model, **ddp_kwargs)\n"),
        # A unit test whose subject is the flag (it checks that the kwargs reach DDP).
        Valid("from accelerate import Accelerator, DistributedDataParallelKwargs\n"
              "def test_kwargs_reach_the_wrapper(net):\n"
              "    handler = DistributedDataParallelKwargs(find_unused_parameters=True)\n"
              "    wrapped = Accelerator(kwargs_handlers=[handler]).prepare(net)\n"
              "    assert wrapped.find_unused_parameters is True\n", filename="tests/test_handlers.py"),
        Valid("class DDP:\n    def __init__(self, m, find_unused_parameters=False): ...\n"
              "model = DDP(net, find_unused_parameters=True)\n"),
        Valid(DDP_IMPORT + "# find_unused_parameters=True was too slow\nmodel = DDP(model)\n"),
        # A project subclass with its own constructor decides what reaches DDP.
        Valid("import torch\n"
              "class Wrapped(torch.nn.parallel.DistributedDataParallel):\n"
              "    def __init__(self, module, find_unused_parameters=False, **kw):\n"
              "        super().__init__(module, **kw)\n"
              "net = Wrapped(net, find_unused_parameters=True)\n"),
        # A project class that is not a DDP subclass.
        Valid("import torch\nclass Holder(torch.nn.Module):\n    pass\n"
              "net = Holder(net, find_unused_parameters=True)\n"),
        Valid("from lightning.pytorch.strategies import DDPStrategy\n"
              "strategy = DDPStrategy(find_unused_parameters=cfg.unused)\n"),
    ]
    invalid = [
        Invalid(DDP_IMPORT + "DDP(m, find_unused_parameters=True)\n", line=2, column=8),
        Invalid("import torch\nmodel = torch.nn.parallel.DistributedDataParallel(\n"
                "    model, device_ids=[rank], find_unused_parameters=True)\n", line=3, column=31),
        Invalid("import torch.nn as nn\nmodel = nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)\n",
                line=2, column=52),
        Invalid("from torch.nn.parallel.distributed import DistributedDataParallel\n"
                "net = DistributedDataParallel(net, find_unused_parameters=True)\n", line=2, column=36),
        Invalid("from accelerate import Accelerator, DistributedDataParallelKwargs\n"
                "kwargs = DistributedDataParallelKwargs(find_unused_parameters=True)\n"
                "accelerator = Accelerator(kwargs_handlers=[kwargs])\n", line=2, column=40),
        Invalid("from torch.nn.parallel import DistributedDataParallel\n"
                "def build(model, rank):\n"
                "    return DistributedDataParallel(model, [rank], rank, 0, True, None, 25, True)\n",
                line=3, column=76),
        Invalid("import torch\n\ndef wrap(model):\n    if torch.cuda.is_available():\n"
                "        model = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters = True)\n"
                "    return model\n", line=5, column=66),
        # Shared gap 5: a local alias of the class.
        Invalid("from torch.nn.parallel import DistributedDataParallel\n"
                "Wrapper = DistributedDataParallel\n"
                "net = Wrapper(m, find_unused_parameters=True)\n", line=3, column=18),
        # A thin project subclass of DDP keeps DDP's constructor: the flag reaches DDP.
        Invalid("import torch\n"
                "class _Parallel(torch.nn.parallel.DistributedDataParallel):\n"
                "    def __getattr__(self, name):\n"
                "        try:\n            return super().__getattr__(name)\n"
                "        except AttributeError:\n            return getattr(self.module, name)\n"
                "def wrap(task, rank):\n"
                "    return _Parallel(task, device_ids=[rank], find_unused_parameters=True)\n",
                line=9, column=47),
        # ... through a project base in between, overriding forward only.
        Invalid("from torch.nn.parallel import DistributedDataParallel as TorchDDP\n"
                "class Base(TorchDDP):\n    pass\n"
                "class StepWrapper(Base):\n"
                "    def forward(self, *a, **k):\n        return self.module.training_step(*a, **k)\n"
                "model = StepWrapper(model, device_ids=[0], find_unused_parameters = True)\n",
                line=7, column=44),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        # A project subclass of DDP (``class DDP(DistributedDataParallel)`` imported
        # from the project's utils) takes the keyword under its own name.
        return ("find_unused_parameters" in sketch.keywords or (
            sketch.may_call(names.DDP, names.ACCELERATE_DDP_KWARGS) and sketch.max_positional >= 4)) \
            and not sketch.in_test_module()

    def check(self, index):
        if is_test_module(index.path):
            return  # a unit test checks that the flag reaches DDP; it pays no training run's step time
        for call in index.calls_to(names.DDP, names.ACCELERATE_DDP_KWARGS):
            arg = call.argument("find_unused_parameters")
            if arg is not None and literal_bool(arg.value) is True:
                yield self.report(arg)
        for call in index.calls:
            if call.qualified_name in (names.DDP, names.ACCELERATE_DDP_KWARGS):
                continue
            arg = call.keyword("find_unused_parameters")
            # A project subclass of DDP that keeps DDP's constructor: the flag reaches DDP.
            if arg is not None and literal_bool(arg.value) is True \
                    and wrapper_subclass(index, call.node.func, names.DDP, same_init=True):
                yield self.report(arg)
