"""## What it does
Flags `torch.nn.DataParallel(...)`, also when it is the fallback branch of a DDP
script.

## Why is this bad?
DataParallel runs one Python process that scatters each batch to the GPUs,
replicates the model on every forward, and gathers outputs on GPU 0. The GIL,
the per-step replication and the imbalance on GPU 0 make it markedly slower
than DistributedDataParallel (one process per GPU), and PyTorch recommends DDP
even on a single machine.

## Example
    model = torch.nn.DataParallel(model)

## Use instead
    # launched with: torchrun --nproc_per_node=NGPUS train.py
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(model.cuda(), device_ids=[local_rank])

Not flagged: subclasses and look-alikes from other libraries
(`torch_geometric.nn.DataParallel`); `isinstance(m, nn.DataParallel)` checks;
unit tests (`test_*.py`, `tests/`, `test_*` functions), which construct the
wrapper to test unwrapping helpers; and a framework's own opt-in DataParallel
strategy (a class such as `DataParallelStrategy` or `DPPlugin` whose job is to
apply the wrapper the user selected with `strategy="dp"`, or a framework
class's method whose DataParallel arm an option of the instance selects:
`if self.data_parallel_backend: ...`). A user's script that picks DataParallel
by a command-line flag (`if args.data_parallel:`) is still flagged.

## References
- https://pytorch.org/docs/stable/generated/torch.nn.DataParallel.html
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
"""

import re

import libcst as cst

from ddplint import names
from ddplint.analysis.values import is_test_module
from ddplint.rule import Invalid, Rule, Valid

# A class that *is* the DataParallel option of a framework: DataParallelStrategy,
# DPStrategy, DataParallelPlugin, LightningDP, ... (not DistributedDataParallel*).
# An option that selects DataParallel: ``data_parallel_backend``, ``use_dp``; not DDP's.
_DP_OPTION = re.compile(r"(?<!distributed_)data_?parallel|(^|_)dp(_|$)", re.IGNORECASE)
_DP_CLASS = re.compile(r"(?<!Distributed)DataParallel|(^|[a-z])DP([A-Z_]|$)")


class DataParallelInsteadOfDDP(Rule):
    code, name, severity = "DDP016", "data-parallel-instead-of-ddp", "info"
    message = ("nn.DataParallel runs every GPU from one process (GIL-bound, model replicated each step, outputs "
               "gathered on GPU 0): slower than DistributedDataParallel; use DDP")
    triggers = ("DataParallel",)

    valid = [
        Valid("from torch.nn.parallel import DistributedDataParallel\nmodel = DistributedDataParallel(model)\n"),
        Valid("import torch\nif isinstance(model, torch.nn.DataParallel):\n    model = model.module\n"),
        Valid("import torch.nn as nn\nclass MyParallel(nn.DataParallel):\n    pass\n"),
        Valid("import torch_geometric.nn as gnn\nmodel = gnn.DataParallel(model)\n"),
        Valid("from mylib import DataParallel\nmodel = DataParallel(model)\n"),
        Valid("import torch\nunwrapped = model.module if isinstance(model, (torch.nn.DataParallel,)) else model\n"),
        Valid("# torch.nn.DataParallel(model) was replaced by DDP\nx = 1\n"),
        # a unit test of an unwrapping helper only constructs the wrapper
        Valid("import torch\ndef test_unwrap_data_parallel():\n    net = torch.nn.Linear(2, 2)\n"
              "    assert unwrap(torch.nn.DataParallel(net)) is net\n", filename="tests/test_unwrap.py"),
        Valid("import torch\nclass UnwrapTest:\n    def test_unwraps(self):\n"
              "        wrapped = torch.nn.DataParallel(make_net())\n        assert unwrap(wrapped) is not wrapped\n",
              filename="helpers_check.py"),
        # a framework's own opt-in DataParallel strategy (the user picked strategy="dp")
        Valid("from torch.nn import DataParallel\nclass DataParallelStrategy(ParallelStrategy):\n"
              "    def setup_module(self, module):\n"
              "        return DataParallel(module=module, device_ids=self.parallel_devices)\n",
              filename="src/framework/strategies/dp.py"),
        Valid("import torch\nclass DPPlugin(Plugin):\n    def wrap(self, model):\n"
              "        return torch.nn.DataParallel(model)\n"),
        # a framework's own DataParallel mode, selected by an option of its trainer object
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nclass Runner:\n"
              "    def wrap_modules(self):\n        if not self.ddp_launch and not self.data_parallel_mode:\n"
              "            return\n        for key, mod in self.mods.items():\n            if self.ddp_launch:\n"
              "                self.mods[key] = DDP(mod, device_ids=[self.device])\n            else:\n"
              "                self.mods[key] = torch.nn.DataParallel(mod)\n"),
    ]
    invalid = [
        Invalid("import torch\nmodel = torch.nn.DataParallel(model)\n", line=2, column=9),
        # a script's own class reading its command-line option: the user's code
        Invalid("import torch\nclass Featurizer:\n    def __init__(self, args):\n"
                "        self.data_parallel = args.data_parallel\n    def build(self, net):\n"
                "        if self.data_parallel:\n            net = torch.nn.DataParallel(net)\n        return net\n"
                "if __name__ == '__main__':\n    Featurizer(parse()).build(make())\n", line=7, column=19),
        # a user's script choosing DataParallel by a command-line flag is still the user's code
        Invalid("import torch\nclass Fitter:\n    def __init__(self, args, net):\n"
                "        if args.data_parallel:\n            net = torch.nn.DataParallel(net)\n"
                "        self.net = net\n", line=5, column=19),
        Invalid("import torch.nn as nn\nmodel = nn.DataParallel(model, device_ids=[0, 1])\n", line=2, column=9),
        Invalid("from torch.nn import DataParallel as DP\nnet = DP(net).cuda()\n", line=2, column=7),
        Invalid("from torch.nn.parallel import DataParallel\nmodel = DataParallel(model)\n", line=2, column=9),
        Invalid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "if args.distributed:\n    model = DDP(model)\nelse:\n    model = torch.nn.DataParallel(model)\n",
                line=6, column=13),
        Invalid("import torch\ndef wrap(model):\n    if torch.cuda.device_count() > 1:\n"
                "        return torch.nn.parallel.data_parallel.DataParallel(model)\n    return model\n",
                line=4, column=16),
        # a user's own trainer class choosing DataParallel (not a DataParallel option class)
        Invalid("import torch\nclass Trainer:\n    def __init__(self, model):\n"
                "        self.model = torch.nn.DataParallel(model).cuda()\n", line=4, column=22),
        # the fallback of a DDP script, under a GPU-count test
        Invalid("import torch\nimport torch.distributed as dist\nif dist.is_initialized():\n"
                "    model = torch.nn.parallel.DistributedDataParallel(model)\n"
                "elif torch.cuda.device_count() > 1:\n    model = torch.nn.DataParallel(model)\n",
                line=6, column=13),
        # an evaluation routine called ``test`` in a training script is no unit test
        Invalid("import torch\ndef test(model, loader):\n    model = torch.nn.DataParallel(model).eval()\n"
                "    return [model(x) for x in loader]\n", line=3, column=13),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return sketch.may_call(names.DATA_PARALLEL) and not sketch.in_test_module()

    def check(self, index):
        if is_test_module(index.path):
            return  # unit tests construct the wrapper to test unwrapping, not to train
        for call in index.calls_to(names.DATA_PARALLEL):
            if not _in_test_function(index, call.node) and not _in_data_parallel_option(index, call.node) \
                    and not _chosen_by_an_instance_option(index, call.node):
                yield self.report(call.node)


def _in_test_function(index, node) -> bool:
    """Inside a ``test_*`` function or a ``Test*`` class (not an evaluation
    routine that happens to be called ``test``)."""
    return any((isinstance(a, cst.FunctionDef) and a.name.value.startswith("test_"))
               or (isinstance(a, cst.ClassDef) and a.name.value.startswith("Test")) for a in index.ancestors(node))


def _chosen_by_an_instance_option(index, node) -> bool:
    """A framework's DataParallel mode inside its own class: the method that
    wraps the modules tests an option of the instance named for it
    (``if not self.distributed_launch and not self.data_parallel_backend: return``
    ... ``else: module = DP(module)``): the user picked DataParallel explicitly."""
    from ddplint.analysis.flow import names_in

    function = next((a for a in index.ancestors(node) if isinstance(a, cst.FunctionDef)), None)
    if function is None or not any(isinstance(a, cst.ClassDef) for a in index.ancestors(function)):
        return False
    if _is_script(index):
        return False  # a script's class reading its own command-line flag: the user's code
    found = []

    class Tests(cst.CSTVisitor):
        def visit_If(self, branch: cst.If) -> None:
            found.extend(names_in(branch.test))

    function.visit(Tests())
    return any(name.startswith("self.") and _DP_OPTION.search(name.split(".")[-1]) for name in found)


def _is_script(index) -> bool:
    """Does the module run as a program (``if __name__ == "__main__":``)?"""
    for statement in index.module.body:
        test = getattr(statement, "test", None)
        if isinstance(statement, cst.If) and isinstance(test, cst.Comparison) \
                and "__name__" in index.module.code_for_node(test):
            return True
    return False


def _in_data_parallel_option(index, node) -> bool:
    """Inside a framework class that implements the opt-in DataParallel mode
    (``class DataParallelStrategy(ParallelStrategy)``): the user chose it."""
    return any(isinstance(a, cst.ClassDef) and _DP_CLASS.search(a.name.value) for a in index.ancestors(node))
