"""## What it does
Flags `torch.nn.utils.clip_grad_norm_(model.parameters(), ...)` when `model` is
a `FullyShardedDataParallel` (FSDP1) model: a local wrap, an alias of a wrapped
attribute (`net = self.net`, `net, opt = self.net, self.opt`), a parameter
that the project passes an FSDP model to, or an attribute of a container object
(`models.generator`) that this module builds with an FSDP model as that keyword
(`return Models(generator=fsdp_model)`, `SimpleNamespace(model=fsdp_model)`).
The model may also be one that a strategy switch makes DDP or FSDP (`if
self.strategy == "ddp": m = DDP(m) elif self.strategy == "fsdp": m = FSDP(m)`,
returned into `self.model`): flagged where the tested flags leave the FSDP wrap
possible (the `else` of `if self.strategy == "ddp":`), with no fix (the model
may be plain there). The parameters may be filtered (`[p for p in model.parameters() if p.requires_grad]`,
inline or through a name bound only to that list), or a submodule's
(`list(model.base_model.parameters())`: its parameters are shards too); no fix is
offered then.
A `model.clip_grad_norm_(...)` elsewhere in the function excuses the free function
only when the two sit in opposite arms of one `if` (the non-FSDP path); a remainder
step after the loop that uses the free function is still flagged.
Not flagged: a base-class method on `self.model` when every subclass that wraps
`self.model` in FSDP overrides that method; `fsdp_model.clip_grad_norm_(...)`; FSDP2 (`fully_shard`) / DTensor
parameters; the arm where `isinstance(model, FSDP)` is false.

## Why is this bad?
Each FSDP1 rank holds only its shard of the flattened gradients. The free
function computes the norm of the local shard, so every rank computes a
different total norm and a different clip coefficient: the ranks apply
inconsistent updates and the "clipped" norm is not the real one.

## Example
    loss.backward()
    torch.nn.utils.clip_grad_norm_(fsdp_model.parameters(), 1.0)

## Use instead
    loss.backward()
    fsdp_model.clip_grad_norm_(1.0)     # all-reduces the shard norms

Fix (unsafe): `torch.nn.utils.clip_grad_norm_(fsdp_model.parameters(), 1.0)`
becomes `fsdp_model.clip_grad_norm_(1.0)` (the other arguments kept), unless it
passes arguments the FSDP method does not take (`error_if_nonfinite`,
`foreach`). Unsafe: the clip coefficient changes to the true global one.

## References
- https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.clip_grad_norm_
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ddplint.analysis.flow import exclusive
from ddplint.analysis.models import may_hold_wrap, overridden_where_wrapped, wrapped_kind
from ddplint.fixes import UNSAFE, NodeFix, delete_until, node_fix, replace
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import SemanticIndex, dotted_name

IMPORTS = "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
CLIP = "torch.nn.utils.clip_grad_norm_"
# A trainer whose strategy switch makes its model DDP or FSDP (JayDS22's shape): the shared
# head of the examples that ask which arm holds which wrap.
STRATEGY_SWITCH = IMPORTS + "from torch.nn.parallel import DistributedDataParallel as DDP\n" + """\
class Trainer:
    def __init__(self, model, strategy):
        self.strategy = strategy
        self.model = self._setup(model)

    def _setup(self, model):
        if self.strategy == "ddp":
            model = DDP(model)
        elif self.strategy == "fsdp":
            model = FSDP(model)
        return model
"""


class Fsdp1NnUtilsClip(Rule):
    code, name, severity = "DDP023", "fsdp1-nn-utils-clip", "error"
    message = "nn.utils.clip_grad_norm_ on an FSDP1 model clips by the local shard's norm; use model.clip_grad_norm_"
    triggers = ("clip_grad_norm_",)
    needs_ddp_context = True
    uses_project = True

    valid = [
        # A strategy switch makes the model DDP or FSDP; the DDP arm clips the module's parameters.
        Valid(STRATEGY_SWITCH + """\

    def clip(self):
        if self.strategy == "ddp":
            torch.nn.utils.clip_grad_norm_(self.model.module.parameters(), 1.0)
"""),
        # The base method clips a plain model: the subclass that shards it clips its own way.
        Valid(IMPORTS + "class Learner:\n    def __init__(self, net):\n        self.net = net.cuda()\n"
                        "    def clip(self, limit):\n"
                        "        return torch.nn.utils.clip_grad_norm_(self.net.parameters(), limit)\n"
                        "class ShardedLearner(Learner):\n    def __init__(self, net):\n        self.net = FSDP(net)\n"
                        "    def clip(self, limit):\n        return self.net.clip_grad_norm_(limit)\n"),
        Valid(IMPORTS + "model = FSDP(net)\nmodel.clip_grad_norm_(1.0)\n"),
        Valid(IMPORTS + "from torch.distributed.fsdp import fully_shard\nfully_shard(model)\n"
                        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"),
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(net)\n"
              "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"),
        Valid(IMPORTS + "model = FSDP(net)\ntorch.nn.utils.clip_grad_norm_(other.parameters(), 1.0)\n"),
        Valid(IMPORTS + "torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)\nmodel = FSDP(net)\n"),
        Valid(IMPORTS + "model = FSDP(net)\ntorch.nn.utils.clip_grad_value_(model.parameters(), 1.0)\n"),
        Valid(IMPORTS + "def clip(model):\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"),
        Valid(IMPORTS + "def step(model, cfg):\n    if cfg.enable_fsdp:\n        model.clip_grad_norm_(1.0)\n"
                        "    else:\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
                        "if cfg.enable_fsdp:\n    m = FSDP(net)\nelse:\n    m = net\nstep(m, cfg)\n"),
        Valid(IMPORTS + "model = FSDP(net)\nmodel = torch.compile(model)\n"
              "model.clip_grad_norm_(max_norm=1.0)\n"),
        # The arm where the model is not the FSDP wrapper.
        Valid(IMPORTS + "model = FSDP(net) if cfg.fsdp else net\nif isinstance(model, FSDP):\n"
                        "    model.clip_grad_norm_(1.0)\nelse:\n"
                        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"),
        Valid(IMPORTS + "class T:\n    def __init__(self, net):\n        self.net = FSDP(net)\n"
                        "        self.head = net.head\n    def step(self):\n        head = self.head\n"
                        "        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)\n"),
        # A container of models: the attribute read is the plain model it holds.
        Valid(IMPORTS + "class Models:\n    def __init__(self, student, teacher):\n"
                        "        self.student, self.teacher = student, teacher\n"
                        "def setup(net, ema):\n    return Models(student=net, teacher=FSDP(ema))\n"
                        "def step(models):\n"
                        "    torch.nn.utils.clip_grad_norm_(models.student.parameters(), 1.0)\n"),
        # A plain function's keyword is not an attribute of what it returns.
        Valid(IMPORTS + "def run(batch, cfg):\n    out = forward(batch, model=FSDP(net))\n"
                        "    torch.nn.utils.clip_grad_norm_(cfg.model.parameters(), 1.0)\n"),
    ]
    invalid = [
        # The model reaches the loop through the trainer's state dict (a93 pytorch-trainer).
        Invalid("""\
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


class Trainer:
    def fit(self, model, optimizer, loader):
        state = {"model": model, "optimizer": optimizer}
        for epoch in range(3):
            self.train_loop(state["model"], state["optimizer"], loader)

    def train_loop(self, model, optimizer, loader):
        for x in loader:
            model(x).sum().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()


def main(net, loader):
    model = FSDP(net)
    Trainer().fit(model, torch.optim.AdamW(model.parameters()), loader)
""", line=14, column=13, fixed="""\
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


class Trainer:
    def fit(self, model, optimizer, loader):
        state = {"model": model, "optimizer": optimizer}
        for epoch in range(3):
            self.train_loop(state["model"], state["optimizer"], loader)

    def train_loop(self, model, optimizer, loader):
        for x in loader:
            model(x).sum().backward()
            model.clip_grad_norm_(max_norm=1.0)
            optimizer.step()


def main(net, loader):
    model = FSDP(net)
    Trainer().fit(model, torch.optim.AdamW(model.parameters()), loader)
"""),
        # Built with a tokenizer by a method that wraps DDP or, through a helper, FSDP (ljm565's
        # trainer): the model may be FSDP wherever no flag says otherwise.
        Invalid(IMPORTS + "from torch.nn.parallel import DistributedDataParallel as DDP\n" + """\
def wrap_fsdp(model):
    model = FSDP(model)
    return model

class Trainer:
    def __init__(self, cfg):
        self.is_ddp, self.is_fsdp = cfg.ddp, cfg.fsdp
        self.model, self.tokenizer = self._init_model(cfg)

    def _init_model(self, cfg):
        model, tokenizer = cfg.build()
        if self.is_ddp:
            model = DDP(model)
        elif self.is_fsdp:
            model = wrap_fsdp(model)
        return model, tokenizer

    def optimizer_step(self):
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=10.0)
""", line=22, column=9),
        # ... its other arm clips the FSDP model's shards (JayDS22's trainer); no fix: the model
        # may be plain there too.
        Invalid(STRATEGY_SWITCH + """\

    def clip(self):
        if self.strategy == "ddp":
            torch.nn.utils.clip_grad_norm_(self.model.module.parameters(), 1.0)
        else:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
""", line=20, column=13),
        # A submodule's parameters of the FSDP model, through a list (a69 CoT-Internalize): shards too.
        Invalid(IMPORTS + "model = FSDP(build(), device_id=torch.cuda.current_device())\n"
                          "trainable = list(model.base_model.parameters())\nloss.backward()\n"
                          "torch.nn.utils.clip_grad_norm_(trainable, 1.0)\n", line=6, column=1),
        # The sharding subclass inherits the base method: it clips the FSDP model with nn.utils.
        Invalid(IMPORTS + "class Learner:\n    def __init__(self, net):\n        self.net = net.cuda()\n"
                          "    def clip(self, limit):\n"
                          "        return torch.nn.utils.clip_grad_norm_(self.net.parameters(), limit)\n"
                          "class ShardedLearner(Learner):\n    def __init__(self, net):\n        self.net = FSDP(net)\n",
                line=7, column=16,
                fixed=IMPORTS + "class Learner:\n    def __init__(self, net):\n        self.net = net.cuda()\n"
                                "    def clip(self, limit):\n        return self.net.clip_grad_norm_(limit)\n"
                                "class ShardedLearner(Learner):\n    def __init__(self, net):\n        self.net = FSDP(net)\n"),
        Invalid(IMPORTS + "model = FSDP(net)\ntorch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
                line=4, column=1,
                fixed=IMPORTS + "model = FSDP(net)\nmodel.clip_grad_norm_(1.0)\n"),
        Invalid(IMPORTS + "from torch.nn.utils import clip_grad_norm_\nmodel = FSDP(net)\n"
                          "clip_grad_norm_(model.parameters(), max_norm=1.0)\n", line=5, column=1,
                fixed=IMPORTS + "from torch.nn.utils import clip_grad_norm_\nmodel = FSDP(net)\nmodel.clip_grad_norm_(max_norm=1.0)\n"),
        Invalid(IMPORTS + "import torch.nn as nn\nmodel = FSDP(net, auto_wrap_policy=p)\n"
                          "nn.utils.clip_grad_norm_(model.parameters(), args.clip)\n", line=5, column=1,
                fixed=IMPORTS + "import torch.nn as nn\nmodel = FSDP(net, auto_wrap_policy=p)\nmodel.clip_grad_norm_(args.clip)\n"),
        Invalid(IMPORTS + "class T:\n    def __init__(self, net):\n        self.model = FSDP(net)\n"
                          "    def step(self):\n        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)\n",
                line=7, column=9,
                fixed=IMPORTS + "class T:\n    def __init__(self, net):\n        self.model = FSDP(net)\n    def step(self):\n        self.model.clip_grad_norm_(1.0)\n"),
        Invalid(IMPORTS + "def train_step(model):\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
                          "train_step(FSDP(net))\n", line=4, column=5,
                fixed=IMPORTS + "def train_step(model):\n    model.clip_grad_norm_(1.0)\ntrain_step(FSDP(net))\n"),
        Invalid("import torch\nfrom torch.distributed.fsdp.fully_sharded_data_parallel import FullyShardedDataParallel\n"
                "model = FullyShardedDataParallel(net)\n"
                "gn = torch.nn.utils.clip_grad.clip_grad_norm_(model.parameters(), 1.0)\n", line=4, column=6,
                fixed="import torch\nfrom torch.distributed.fsdp.fully_sharded_data_parallel import FullyShardedDataParallel\nmodel = FullyShardedDataParallel(net)\ngn = model.clip_grad_norm_(1.0)\n"),
        Invalid(IMPORTS + "model = FSDP(net)\nfor x in loader:\n    model(x).sum().backward()\n"
                          "    torch.nn.utils.clip_grad_norm_(parameters=model.parameters(), max_norm=1.0)\n",
                line=6, column=5,
                fixed=IMPORTS + "model = FSDP(net)\nfor x in loader:\n    model(x).sum().backward()\n    model.clip_grad_norm_(max_norm=1.0)\n"),
        Invalid(IMPORTS + "model = FSDP(net)\ntorch.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0)\n",
                line=4, column=1,
                fixed=IMPORTS + "model = FSDP(net)\nmodel.clip_grad_norm_(1.0)\n"),
        # Arguments the FSDP method does not take: no fix.
        Invalid(IMPORTS + "model = FSDP(net)\n"
                          "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)\n",
                line=4, column=1),
        # Aliases of a wrapped attribute (plain and tuple-unpacked).
        Invalid(IMPORTS + "class T:\n    def __init__(self, net):\n        self.net = FSDP(net)\n"
                          "    def step(self):\n        net = self.net\n"
                          "        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)\n", line=8, column=9,
                fixed=IMPORTS + "class T:\n    def __init__(self, net):\n        self.net = FSDP(net)\n"
                "    def step(self):\n        net = self.net\n        net.clip_grad_norm_(1.0)\n"),
        Invalid(IMPORTS + "class T:\n    def __init__(self, net, opt):\n        self.net = FSDP(net)\n"
                          "        self.opt = opt\n    def step(self):\n        net, opt = self.net, self.opt\n"
                          "        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)\n        opt.step()\n",
                line=9, column=9,
                fixed=IMPORTS + "class T:\n    def __init__(self, net, opt):\n        self.net = FSDP(net)\n"
                "        self.opt = opt\n    def step(self):\n        net, opt = self.net, self.opt\n"
                "        net.clip_grad_norm_(1.0)\n        opt.step()\n"),
        # The model is held by a container object built with it as a keyword (a dataclass of the
        # run's models, a namespace): the step reads it back as an attribute.
        Invalid(IMPORTS + "from dataclasses import dataclass\n@dataclass\nclass Models:\n"
                          "    generator: object = None\n"
                          "class Trainer:\n    def setup_models(self, cfg):\n        generator = build()\n"
                          "        if cfg.use_fsdp:\n            generator = FSDP(generator)\n"
                          "        return Models(generator=generator)\n"
                          "    def forward_pass(self, batch, models):\n"
                          "        models.generator(batch).mean().backward()\n"
                          "        torch.nn.utils.clip_grad_norm_(models.generator.parameters(), 1.0)\n",
                line=15, column=9,
                fixed=IMPORTS + "from dataclasses import dataclass\n@dataclass\nclass Models:\n"
                                "    generator: object = None\n"
                                "class Trainer:\n    def setup_models(self, cfg):\n        generator = build()\n"
                                "        if cfg.use_fsdp:\n            generator = FSDP(generator)\n"
                                "        return Models(generator=generator)\n"
                                "    def forward_pass(self, batch, models):\n"
                                "        models.generator(batch).mean().backward()\n"
                                "        models.generator.clip_grad_norm_(1.0)\n"),
        Invalid(IMPORTS + "from types import SimpleNamespace\n"
                          "def build(net):\n    model = FSDP(net)\n    return SimpleNamespace(model=model, step=0)\n"
                          "def train(state, loader):\n    for batch in loader:\n"
                          "        state.model(batch).sum().backward()\n"
                          "        torch.nn.utils.clip_grad_norm_(state.model.parameters(), 1.0)\n",
                line=10, column=9,
                fixed=IMPORTS + "from types import SimpleNamespace\n"
                                "def build(net):\n    model = FSDP(net)\n    return SimpleNamespace(model=model, step=0)\n"
                                "def train(state, loader):\n    for batch in loader:\n"
                                "        state.model(batch).sum().backward()\n"
                                "        state.model.clip_grad_norm_(1.0)\n"),
    ]

    invalid += [
        # A filtered list of the FSDP1 model's parameters, inline or through a name (no fix:
        # the method clips every parameter).
        Invalid(IMPORTS + "model = FSDP(net, use_orig_params=True)\n"
                          "torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)\n",
                line=4, column=1),
        Invalid(IMPORTS + "import torch.nn as nn\ndef fit(net, loader, limit):\n    model = FSDP(net)\n"
                          "    for batch in loader:\n        model(batch).sum().backward()\n"
                          "        trainable = [q for q in model.parameters() if q.requires_grad]\n"
                          "        nn.utils.clip_grad_norm_(trainable, limit)\n",
                line=9, column=9),
        # The FSDP method on the main path and the free function on a remainder step after the
        # loop (not an if/else of a switch): the free function still clips an FSDP1 model.
        Invalid("from torch.nn.utils import clip_grad_norm_\n"
                "def train(model, loader, opt, k):\n    for i, batch in enumerate(loader):\n"
                "        model(batch).sum().backward()\n        if (i + 1) % k == 0:\n"
                "            model.clip_grad_norm_(max_norm=1.0)\n            opt.step()\n"
                "    clip_grad_norm_(model.parameters(), 1.0)\n    opt.step()\n"
                "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
                "train(FSDP(net), loader, opt, 4)\n",
                line=8, column=5,
                fixed="from torch.nn.utils import clip_grad_norm_\n"
                      "def train(model, loader, opt, k):\n    for i, batch in enumerate(loader):\n"
                      "        model(batch).sum().backward()\n        if (i + 1) % k == 0:\n"
                      "            model.clip_grad_norm_(max_norm=1.0)\n            opt.step()\n"
                      "    model.clip_grad_norm_(1.0)\n    opt.step()\n"
                      "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
                      "train(FSDP(net), loader, opt, 4)\n"),
    ]
    valid += [
        # A list of another model's parameters, or a name rebound on some path.
        Valid(IMPORTS + "model = FSDP(net)\n"
                        "torch.nn.utils.clip_grad_norm_([p for p in head.parameters() if p.requires_grad], 1.0)\n"),
        Valid(IMPORTS + "model = FSDP(net)\nparams = [p for p in model.parameters()]\n"
                        "if cfg.head_only:\n    params = list(head.parameters())\n"
                        "torch.nn.utils.clip_grad_norm_(params, 1.0)\n"),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return sketch.may_call("torch.nn.utils.clip_grad_norm_")

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        for site in index.calls_to(CLIP):
            params = site.argument("parameters", 0)
            model = _parameters_receiver(params.value, index) if params is not None else None
            if model is not None and not may_hold_wrap(index, model, site.order, "fsdp"):
                # ``list(model.base_model.parameters())``: a submodule of the FSDP model holds shards too
                model = _fsdp_root(index, model, site.order)
                submodule = True
            else:
                submodule = False
            if model is not None and may_hold_wrap(index, model, site.order, "fsdp") \
                    and not _fsdp_path_elsewhere(index, site, model) and not _overridden(index, site, model):
                # A filtered list (``[p for p in m.parameters() if ...]``) or a name bound to one, or a
                # submodule's parameters: the method clips every parameter, so no fix is offered; nor for
                # a model that a strategy switch may also leave plain or DDP (no ``clip_grad_norm_`` there).
                direct = isinstance(params.value, cst.Call) and _parameters_receiver(params.value) is not None \
                    and not submodule and wrapped_kind(index, model, site.order) == "fsdp"
                yield self.report(site.node, fix=_fix(site.node, params, model) if direct else None)


def _fsdp_root(index: SemanticIndex, expr: cst.BaseExpression, order: int) -> Optional[cst.BaseExpression]:
    """The FSDP model that ``expr`` is an attribute chain of (``model`` for
    ``model.base_model``, ``model.module.encoder``), or None."""
    while isinstance(expr, cst.Attribute):
        expr = expr.value
        if may_hold_wrap(index, expr, order, "fsdp"):
            return expr
    return None


FSDP_CLIP_PARAMETERS = ("max_norm", "norm_type")


def _fix(call: cst.Call, params: cst.Arg, model: cst.BaseExpression) -> Optional[NodeFix]:
    """``model.clip_grad_norm_(<the other arguments>)``."""
    name = dotted_name(model)
    rest = [arg for arg in call.args if arg is not params]
    if name is None or not rest or call.args[0] is not params or any(
            arg.star or (arg.keyword is not None and arg.keyword.value not in FSDP_CLIP_PARAMETERS)
            for arg in rest) or len(rest) > len(FSDP_CLIP_PARAMETERS):
        return None
    return node_fix(f"Call {name}.clip_grad_norm_ (the FSDP method)", UNSAFE,
                    replace(call.func, f"{name}.clip_grad_norm_"), delete_until(params, rest[0]))


def _fsdp_path_elsewhere(index: SemanticIndex, site, model: cst.BaseExpression) -> bool:
    """``if cfg.enable_fsdp: model.clip_grad_norm_(...) else: nn.utils.clip_grad_norm_(...)``:
    the free function is the non-FSDP path (the model is wrapped only sometimes)."""
    name = dotted_name(model)
    return any(other.scope is site.scope and dotted_name(other.receiver) == name
               and exclusive(index, other.node, site.node)
               for other in index.method_calls("clip_grad_norm_") if other.receiver is not None)


def _overridden(index: SemanticIndex, site, model: cst.BaseExpression) -> bool:
    """``self.policy`` is an FSDP model only in subclasses that override the
    method holding the clip: the base method clips a plain model."""
    name = dotted_name(model) or ""
    return name.startswith("self.") and name.count(".") == 1 \
        and overridden_where_wrapped(index, site.node, name.split(".")[1])


def _parameters_receiver(expr: cst.BaseExpression, index: Optional[SemanticIndex] = None,
                         _hops: int = 0) -> Optional[cst.BaseExpression]:
    """``m`` in ``m.parameters()``, ``list(m.parameters())``, ``[p for p in m.parameters() if
    p.requires_grad]`` (also a generator), or a local name bound only to one of those
    (``params = [p for p in m.parameters() if p.requires_grad]``)."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("list", "tuple") \
            and expr.args:
        expr = expr.args[0].value
    if isinstance(expr, (cst.ListComp, cst.GeneratorExp)) and isinstance(expr.elt, cst.Name) \
            and isinstance(expr.for_in.target, cst.Name) and expr.for_in.target.value == expr.elt.value \
            and expr.for_in.inner_for_in is None:
        expr = expr.for_in.iter
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "parameters":
        return expr.func.value
    if index is not None and isinstance(expr, cst.Name) and _hops < 2:
        values = index.reaching_values(expr)
        if values and len(values) == 1:
            return _parameters_receiver(values[0], index, _hops + 1)
    return None
