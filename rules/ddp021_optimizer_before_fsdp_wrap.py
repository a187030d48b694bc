"""## What it does
Flags an optimizer built from `model.parameters()` before the same model is
wrapped in `FullyShardedDataParallel` (FSDP1) without `use_orig_params=True`.
Not when the two never meet: opposite arms of one `if`, or of two `if`s with the
same test (`if args.first:` and `if args.first == False:`).

## Why is this bad?
FSDP1 (with the default `use_orig_params=False`) flattens the module's
parameters into new `FlatParameter`s and frees the originals. An optimizer built
earlier holds the old tensors, which no longer receive gradients: `step()` does
nothing and the model silently never trains.

## Example
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model = FSDP(model)

## Use instead
    model = FSDP(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)

## References
- https://pytorch.org/docs/stable/fsdp.html
- https://pytorch.org/tutorials/intermediate/FSDP_tutorial.html
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ddplint import names
from ddplint.analysis import flow
from ddplint.analysis.values import literal_bool
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import CallSite, SemanticIndex, dotted_name

IMPORTS = "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"


class OptimizerBeforeFsdpWrap(Rule):
    code, name, severity = "DDP021", "optimizer-before-fsdp-wrap", "error"
    message = "optimizer built before the FSDP wrap holds the pre-wrap parameters: the model never trains"
    triggers = ("FullyShardedDataParallel",)
    needs_ddp_context = True

    valid = [
        Valid(IMPORTS + "model = FSDP(model)\nopt = torch.optim.AdamW(model.parameters())\n"),
        Valid(IMPORTS + "opt = torch.optim.AdamW(model.parameters())\nmodel = FSDP(model, use_orig_params=True)\n"),
        Valid("import torch\nfrom torch.distributed.fsdp import fully_shard, FullyShardedDataParallel\n"
              "opt = torch.optim.AdamW(model.parameters())\nfully_shard(model)\n"),
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "import torch.distributed.fsdp\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
              "model = DDP(model)\n"),
        Valid(IMPORTS + "opt = torch.optim.AdamW(other.parameters())\nmodel = FSDP(model)\n"),
        Valid(IMPORTS + "opt = torch.optim.AdamW(model.parameters())\nmodel = FSDP(model, **fsdp_kwargs)\n"),
        Valid(IMPORTS + "def a():\n    opt = torch.optim.AdamW(model.parameters())\n"
                        "def b():\n    model = FSDP(model)\n"),
        Valid(IMPORTS + "opt = torch.optim.AdamW(model.parameters())\n"
                        "model = FSDP(model, use_orig_params=cfg.orig)\n"),
        # The pre-wrap optimizer serves the DDP path; the FSDP path builds its own after the wrap.
        Valid(IMPORTS + "def main(args):\n    opt = torch.optim.AdamW(net.parameters())\n    if args.fsdp:\n"
                        "        net = FSDP(net)\n        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)\n"
                        "    train(net, opt)\n"),
        Valid(IMPORTS + "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nif use_fsdp:\n"
                        "    model = FSDP(model, device_id=rank)\n    log('wrapped')\n"
                        "    optimizer = torch.optim.SGD([{'params': model.parameters()}], lr=0.1)\n"),
        # Two stages: stage one wraps then builds its optimizer; the later wrap runs only
        # when stage one did not (``== False`` is the opposite test), so never after it.
        Valid(IMPORTS + "def main(args):\n    if args.first:\n        model = FSDP(model)\n"
                        "    if args.first:\n        opt = torch.optim.AdamW(model.parameters())\n"
                        "        train(model, opt)\n"
                        "    if args.first == False:\n        model = FSDP(model)\n"
                        "    opt2 = torch.optim.AdamW(model.parameters())\n"),
    ]
    invalid = [
        Invalid(IMPORTS + "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\nmodel = FSDP(model)\n",
                line=3, column=7),
        Invalid(IMPORTS + "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                          "model = FSDP(model, use_orig_params=False)\n", line=3, column=7),
        Invalid("from torch.optim import Adam\nfrom torch.distributed.fsdp import FullyShardedDataParallel\n"
                "def main():\n    optimizer = Adam(net.parameters())\n    net = FullyShardedDataParallel(net)\n",
                line=4, column=17),
        Invalid(IMPORTS + "opt = torch.optim.AdamW(filter(lambda p: p.requires_grad, model.parameters()))\n"
                          "fsdp = FSDP(model, auto_wrap_policy=policy)\n", line=3, column=7),
        Invalid(IMPORTS + "opt = torch.optim.AdamW([{'params': model.parameters(), 'lr': 1e-4}])\n"
                          "model = FSDP(model)\n", line=3, column=7),
        Invalid(IMPORTS + "class T:\n    def setup(self):\n        self.opt = torch.optim.Adam(self.model.parameters())\n"
                          "        self.model = FSDP(self.model)\n", line=5, column=20),
        Invalid("import torch\nimport torch.distributed.fsdp as fsdp\n"
                "opt = torch.optim.AdamW(model.parameters())\nmodel = fsdp.FullyShardedDataParallel(model)\n",
                line=3, column=7),
        Invalid(IMPORTS + "opt = torch.optim.AdamW(model.named_parameters())\nmodel = FSDP(model, device_id=rank)\n",
                line=3, column=7),
        # Rebuilt only on a branch after the wrap: the other path keeps the stale optimizer.
        Invalid(IMPORTS + "def main(args):\n    opt = torch.optim.AdamW(net.parameters())\n    net = FSDP(net)\n"
                          "    if args.reset:\n        opt = torch.optim.AdamW(net.parameters())\n", line=4, column=11),
        # ... or rebuilt over another model's parameters.
        Invalid(IMPORTS + "opt = torch.optim.AdamW(model.parameters())\nsharded = FSDP(model)\n"
                          "opt = torch.optim.AdamW(model.parameters())\n", line=3, column=7),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return sketch.may_call(names.FSDP)

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        wraps = [site for site in index.calls_to(names.FSDP) if _keeps_flat_params(site)]
        if not wraps:
            return
        for site in index.calls:
            if not (site.qualified_name or "").startswith("torch.optim.") or not site.node.args:
                continue
            model = _parameters_of(site.node.args[0].value)
            if model is None:
                continue
            for wrap in wraps:
                inner = wrap.argument("module", 0)
                if wrap.order > site.order and wrap.scope is site.scope and inner is not None \
                        and dotted_name(inner.value) == model and not flow.exclusive(index, site.node, wrap.node) \
                        and not _rebuilt_after(index, site, wrap):
                    yield self.report(site.node)
                    break


def _assigned(index: SemanticIndex, node: cst.CSTNode) -> Optional[str]:
    parent = index.parent(node)
    if isinstance(parent, cst.Assign) and parent.value is node and len(parent.targets) == 1:
        return dotted_name(parent.targets[0].target)
    return None


def _rebuilt_after(index: SemanticIndex, optimizer: CallSite, wrap: CallSite) -> bool:
    """``opt = AdamW(model.parameters())`` ... ``model = FSDP(model)`` then
    ``opt = AdamW(model.parameters())`` again: the same name is rebound, after
    the wrap and on its path (no branch or loop between the wrap's block and
    the rebinding), to an optimizer over the wrapped model's parameters; the
    pre-wrap one serves only the other (DDP / single-process) path."""
    name, wrapped = _assigned(index, optimizer.node), _assigned(index, wrap.node)
    statement = index.parent(wrap.node)
    block = index.parent(index.parent(statement)) if statement is not None else None
    if name is None or wrapped is None or block is None:
        return False
    for site in index.calls:
        if site.order <= wrap.order or site.scope is not wrap.scope \
                or not (site.qualified_name or "").startswith("torch.optim.") or not site.node.args \
                or _assigned(index, site.node) != name or _parameters_of(site.node.args[0].value) != wrapped:
            continue
        for ancestor in index.ancestors(site.node):
            if ancestor is block:
                return True
            if isinstance(ancestor, (cst.If, cst.For, cst.While, cst.Try, cst.With, cst.FunctionDef, cst.Lambda)):
                break
    return False


def _keeps_flat_params(site: CallSite) -> bool:
    """FSDP1 with ``use_orig_params`` literally False or absent (no ``**kwargs``)."""
    if site.has_star_kwargs:
        return False
    arg = site.keyword("use_orig_params")
    return arg is None or literal_bool(arg.value) is False


def _parameters_of(expr: cst.CSTNode) -> Optional[str]:
    """The model whose ``.parameters()`` / ``.named_parameters()`` the expression uses."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value in ("parameters", "named_parameters"):
            return dotted_name(node.func.value)
        stack.extend(node.children)
    return None
