"""## What it does
Flags changes to a model's parameters after it was wrapped in
`DistributedDataParallel`: `requires_grad_(False)` on a submodule (not on the whole
wrapped model: a GAN freezes one network while the other trains),
`p.requires_grad = False` in a loop over its parameters (also those of an item of
one of its module lists: `model.module.blocks[i].parameters()`), a new submodule assigned
to it (`model.module.head = nn.Linear(...)`), or `.to(dtype)` / `.half()` of it;
also in a function (of any module) that receives a DDP model from a call site of
the project (`freeze_head(ddp_model)`), and a function of the module handed the
DDP model's parameters collected after the wrap that sets `requires_grad =
False` on some of them (`filter_parameters(list(model.named_parameters()), rx)`,
reported at that call).
Also a method of the model's class run on the DDP model's `.module` after the
wrap (`model.module.expand_heads(n)`) when every method of that name in the
project's classes assigns a new torch.nn module or Parameter to `self.x` or sets
`requires_grad = False` on `self`'s parameters (a freezing method only when the
module's wraps do not pass `find_unused_parameters=True`, with which DDP marks
the frozen parameters ready).
Also a DDP model kept by an object (``self.student = student`` in its
constructor) and handed on from there (``self.helper(self.student, x)``) to a
function that freezes it.
Not flagged: changes before the wrap, a re-wrap after the change, EMA/teacher
copies (modules that never run backward), also through a helper that freezes
the model it is given when every call of it passes a DDP model whose forwards
all run under `torch.no_grad()`; a model a builder made for one process
(`cfg.backbone.num_gpus = 1` just before `get_network(cfg.backbone)`, or
`local_rank=-1` / `world_size=1` / `distributed=False` passed to it), which
the builder leaves unwrapped.

## Why is this bad?
DDP builds its reducer (gradient buckets, the set of parameters that must
receive a gradient) in its constructor. Parameters frozen, replaced or re-typed
afterwards no longer match the buckets: backward fails with "Expected to have
finished reduction in the prior iteration", or new parameters are never
synchronised across ranks.

## Example
    model = DDP(model, device_ids=[local_rank])
    for p in model.module.backbone.parameters():
        p.requires_grad = False

## Use instead
    for p in model.backbone.parameters():
        p.requires_grad = False
    model = DDP(model, device_ids=[local_rank])

## References
- https://pytorch.org/docs/stable/notes/ddp.html#internal-design
- https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ddplint import names
from ddplint.analysis.values import literal_bool
from ddplint.analysis.flow import calls_in_function as flow_calls, grad_mode, helper_functions
from ddplint.analysis.models import project_of, returned_wrap, wrapped_root
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import CallSite, SemanticIndex, dotted_name

IMPORTS = "import torch\nimport torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
_DTYPES = ("float16", "half", "bfloat16", "float64", "double", "float32", "float")
_CASTS = ("half", "bfloat16", "double")


class ParamsModifiedAfterWrap(Rule):
    code, name, severity = "DDP024", "params-modified-after-wrap", "warning"
    message = "parameters changed after the DDP wrap: DDP's reducer was built for the old ones"
    # The model may be wrapped in another module and passed in (project analysis).
    triggers = ("requires_grad", ".to(", ".half(", ".bfloat16(", ".double(", "nn.", ".module.")
    needs_ddp_context = True
    uses_project = True

    valid = [
        # A GAN freezes one whole network while the other trains and switches it back on
        # before its own backward (a103 Faster-GNGAN, COIGAN).
        Valid("""\
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def requires_grad(model, flag=True):
    for p in model.parameters():
        p.requires_grad = flag


def train(G, D, loader, G_opt, D_opt, rank):
    G = DDP(G.cuda(rank), device_ids=[rank])
    D = DDP(D.cuda(rank), device_ids=[rank])
    for real in loader:
        D.requires_grad_(True)
        requires_grad(G, False)
        d_loss = D(G(torch.randn(8, 128)).detach()).mean() - D(real).mean()
        d_loss.backward()
        D_opt.step()
        D.requires_grad_(False)
        requires_grad(G, True)
        g_loss = -D(G(torch.randn(8, 128))).mean()
        g_loss.backward()
        G_opt.step()
"""),
        # The same selection before the wrap.
        Valid(IMPORTS + "def keep_matching(pairs, pattern):\n    def keep(item):\n        name, w = item\n"
                        "        if pattern not in name:\n            w.requires_grad = False\n"
                        "        return pattern in name\n    return list(filter(keep, pairs))\n"
                        "pairs = keep_matching(list(net.named_parameters()), 'head')\n"
                        "model = DDP(net.cuda(), device_ids=[rank])\n"),
        Valid(IMPORTS + "model.backbone.requires_grad_(False)\nmodel = DDP(model)\n"),
        Valid(IMPORTS + "for p in model.parameters():\n    p.requires_grad = False\nmodel = DDP(model)\n"),
        Valid(IMPORTS + "ddp = DDP(model)\nmodel.head = nn.Linear(4, 2)\nddp = DDP(model)\n"),  # re-wrapped
        Valid(IMPORTS + "model = DDP(model)\nema = copy.deepcopy(model.module)\nema.requires_grad_(False)\n"),
        Valid(IMPORTS + "model = DDP(model)\nfor p in teacher.parameters():\n    p.requires_grad = False\n"),
        # Items of a module list frozen before the wrap, or of the EMA copy after it.
        Valid(IMPORTS + "for i in range(14, 28):\n    for p in net.blocks[i].parameters():\n"
                        "        p.requires_grad = False\nmodel = DDP(net)\n"),
        Valid(IMPORTS + "ema = deepcopy(net)\nmodel = DDP(net)\nfor i in range(4):\n"
                        "    for p in ema.blocks[i].parameters():\n        p.requires_grad = False\n"),
        Valid(IMPORTS + "model = DDP(model)\nx = x.to(torch.float16)\nmodel.module.requires_grad_(True)\n"),
        Valid(IMPORTS + "model = DDP(model)\nmodel.train()\nmodel.module.eval()\n"),
        Valid(IMPORTS + "model = DDP(model)\nmodel.module.head.weight.data.zero_()\n"),
        Valid(IMPORTS + "def freeze(m):\n    m.requires_grad_(False)\nfreeze(model)\nmodel = DDP(model)\n"),
        # The same list collected before the wrap and frozen before it; or from another model.
        Valid(IMPORTS + "frozen = [p for n, p in net.named_parameters() if 'text' in n]\n"
                        "for k in frozen:\n    k.requires_grad = False\nmodel = DDP(net)\n"),
        Valid(IMPORTS + "model = DDP(net)\nteacher_params = list(teacher.parameters())\n"
                        "for k in teacher_params:\n    k.requires_grad = False\n"),
        Valid(IMPORTS + "if args.distributed:\n    model = DDP(model)\nelse:\n"
                        "    model.features = nn.DataParallel(model.features)\n"),
        # The function is given the model before the wrap.
        Valid(IMPORTS + "def freeze_backbone(model):\n    for p in model.backbone.parameters():\n"
                        "        p.requires_grad = False\nfreeze_backbone(net)\nddp = DDP(net)\n"),
        Valid(IMPORTS + "def set_encoder_grad(model, value):\n    for p in model.module.encoder.parameters():\n"
                        "        p.requires_grad = value\nmodel = DDP(net)\nset_encoder_grad(model, True)\n"),
        # A momentum (EMA) target network that never runs backward.
        Valid(IMPORTS + "target_encoder = DDP(target_encoder)\nfor p in target_encoder.parameters():\n"
                        "    p.requires_grad = False\nwith torch.no_grad():\n    h = target_encoder(x)\n"),
        # A helper freezes every parameter of the model it is given, and the one DDP
        # model handed to it only runs under no_grad (a frozen auxiliary predictor).
        Valid(IMPORTS + """\
class Forecaster:
    def __init__(self, backbone, helper_net, rank):
        self.net = DDP(backbone.cuda(), device_ids=[rank])
        self.aux = DDP(helper_net.cuda(), device_ids=[rank])
        self.freeze_all(self.aux)

    def freeze_all(self, module):
        for w in module.parameters():
            w.requires_grad = False

    def step(self, x, y, opt):
        with torch.no_grad():
            x = self.aux(x)
        (self.net(x) - y).pow(2).mean().backward()
        opt.step()
"""),
        # A method of the model that only reads its parameters, and one that changes them before the wrap.
        Valid(IMPORTS + """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 2)
    def widen(self, n):
        self.head = nn.Linear(8, 2 + n)
    def count(self):
        return sum(p.numel() for p in self.parameters())

net = Net()
net.widen(3)
model = DDP(net.cuda(), device_ids=[0])
print(model.module.count())
"""),
        # Two classes define the method and only one changes its parameters: which one runs is unknown.
        Valid(IMPORTS + """\
class A(nn.Module):
    def adapt(self):
        self.extra = nn.Linear(4, 4)
class B(nn.Module):
    def adapt(self):
        self.scale = 2.0
model = DDP(build(), device_ids=[rank])
model.module.adapt()
"""),
        # A freezing method with find_unused_parameters=True: DDP marks the frozen parameters ready.
        Valid(IMPORTS + """\
class TwoStage(nn.Module):
    def freeze_teacher(self):
        for p in self.teacher.parameters():
            p.requires_grad = False
model = DDP(TwoStage().cuda(), device_ids=[rank], find_unused_parameters=True)
model.module.freeze_teacher()
"""),
        # A builder that wraps only for several GPUs, called with the configuration switched to
        # one just before: it returns the plain model (OpenOOD: "don't wrap ddp here").
        Valid(IMPORTS + """\
def get_network(cfg):
    if cfg.name == "rot_net":
        if cfg.verbose:
            print("building the backbone")
        cfg.backbone.num_gpus = 1
        backbone = get_network(cfg.backbone)
        backbone.fc = nn.Identity()
        net = RotNet(backbone)
    else:
        net = ResNet18()
    if cfg.num_gpus > 1:
        net = DDP(net.cuda(), device_ids=[torch.cuda.current_device()])
    return net
"""),
    ]
    invalid = [
        # Only the arm where the model has a ``.module`` (the wrapper) is the DDP model (a59 nemo_test).
        Invalid(IMPORTS + """\
class Solver:
    def __init__(self, net, rank):
        self.model = DDP(net.cuda(rank), device_ids=[rank])

    def freeze_evm_net(self):
        if hasattr(self.model, 'module'):
            for param in self.model.module.evm_net.parameters():
                param.requires_grad = False
        else:
            for param in self.model.evm_net.parameters():
                param.requires_grad = False
""", line=11, column=17),
        # ... without the switch, the recursive call may hand back the DDP model.
        Invalid(IMPORTS + """\
def get_network(cfg):
    if cfg.name == "rot_net":
        backbone = get_network(cfg.backbone)
        backbone.fc = nn.Identity()
        net = RotNet(backbone)
    else:
        net = ResNet18()
    if cfg.num_gpus > 1:
        net = DDP(net.cuda(), device_ids=[torch.cuda.current_device()])
    return net
""", line=7, column=9),
        # New parameters are never synchronised, whatever find_unused_parameters says.
        Invalid(IMPORTS + """\
class Net(nn.Module):
    def add_task_head(self, n):
        self.heads = nn.ModuleList([nn.Linear(16, n)])
model = DDP(Net().cuda(), device_ids=[rank], find_unused_parameters=True)
model.module.add_task_head(5)
""", line=8, column=1),
        # A method of the model run on the DDP model's .module after the wrap: new Parameters and submodules.
        Invalid(IMPORTS + """\
class Encoder(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)
    def grow_vocab(self, extra):
        bigger = nn.Embedding(1000 + extra, 64)
        self.embed = bigger
        self.proj.bias = nn.Parameter(torch.zeros(64))

def main(rank):
    model = DDP(Encoder(64).cuda(rank), device_ids=[rank])
    model.module.grow_vocab(10)
""", line=15, column=5),
        # ... a freezing method, on an attribute holding the wrap.
        Invalid(IMPORTS + """\
class Backbone(nn.Module):
    def freeze_stem(self):
        for name, p in self.stem.named_parameters():
            p.requires_grad = False

class Trainer:
    def setup(self, net, rank):
        self.net = DDP(net, device_ids=[rank])
    def finetune(self):
        self.net.module.freeze_stem()
""", line=13, column=9),
        Invalid(IMPORTS + """\
class Head(nn.Module):
    def lock(self):
        self.classifier.requires_grad_(False)
ddp = DDP(Head(), device_ids=[0])
ddp.module.lock()
""", line=8, column=1),
        # The same helper given a DDP model that also runs backward.
        Invalid(IMPORTS + """\
class Forecaster:
    def __init__(self, backbone, helper_net, rank):
        self.net = DDP(backbone.cuda(), device_ids=[rank])
        self.aux = DDP(helper_net.cuda(), device_ids=[rank])
        self.freeze_all(self.aux)

    def freeze_all(self, module):
        for w in module.parameters():
            w.requires_grad = False

    def step(self, x, y, opt):
        x = self.aux(x)
        (self.net(x) - y).pow(2).mean().backward()
        opt.step()
""", line=12, column=13),
        # The wrapped model's parameters, collected after the wrap, handed to a selector that
        # freezes the ones it drops (through a nested predicate given to filter()).
        Invalid(IMPORTS + "def keep_matching(pairs, pattern):\n    def keep(item):\n        name, w = item\n"
                          "        if pattern not in name:\n            w.requires_grad = False\n"
                          "        return pattern in name\n    return list(filter(keep, pairs))\n"
                          "model = DDP(net.cuda(), device_ids=[rank])\n"
                          "pairs = [(n, w) for n, w in model.named_parameters() if w.requires_grad]\n"
                          "pairs = keep_matching(pairs, 'head')\n", line=13, column=9),
        Invalid(IMPORTS + "model = DDP(model)\nmodel.module.backbone.requires_grad_(False)\n", line=5, column=1),
        # A list of the DDP model's parameters collected after the wrap, frozen later.
        Invalid(IMPORTS + "def main(args):\n    model = DDP(net, device_ids=[rank])\n"
                          "    named = list(model.named_parameters())\n"
                          "    frozen = [p for n, p in named if 'text' in n]\n"
                          "    for epoch in range(9):\n        if epoch == args.freeze_after:\n"
                          "            for k in frozen:\n                k.requires_grad = False\n",
                line=11, column=17),
        Invalid(IMPORTS + "ddp = DDP(net)\nheads = tuple(ddp.module.head.parameters())\nfor w in heads:\n"
                          "    w.requires_grad = False\n", line=7, column=5),
        Invalid(IMPORTS + "model = DDP(model)\nfor p in model.module.encoder.parameters():\n"
                          "    p.requires_grad = False\n", line=6, column=5),
        # Items of a module list of the wrapped model (a frozen decoder half).
        Invalid(IMPORTS + "model = DDP(net.cuda(), device_ids=[rank])\nif args.freeze_decoder:\n"
                          "    for i in range(14, 28):\n        for param in model.module.blocks[i].parameters():\n"
                          "            param.requires_grad = False\n", line=8, column=13),
        Invalid(IMPORTS + "ddp = DDP(net)\nfor name, w in ddp.module.layers[:6].named_parameters():\n"
                          "    w.requires_grad = False\n", line=6, column=5),
        Invalid(IMPORTS + "ddp_model = DDP(net, device_ids=[rank])\nnet.fc = nn.Linear(512, 10)\n",
                line=5, column=1),
        Invalid(IMPORTS + "model = DDP(model)\nmodel.module.to(torch.float16)\n", line=5, column=1),
        Invalid(IMPORTS + "model = DDP(model)\nmodel.module.half()\n", line=5, column=1),
        Invalid(IMPORTS + "def main():\n    model = DDP(net)\n    for name, p in model.named_parameters():\n"
                          "        if 'bias' in name:\n            p.requires_grad = False\n", line=8, column=13),
        Invalid(IMPORTS + "class T:\n    def __init__(self, net):\n        self.model = DDP(net)\n"
                          "        self.model.module.classifier = nn.Linear(8, 2)\n", line=7, column=9),
        Invalid(IMPORTS + "model = DDP(model)\nmodel.module.to(dtype=torch.bfloat16)\n", line=5, column=1),
        # A function that freezes the DDP model it is given (here from this module;
        # fixtures/lifecycle_project: from another module).
        Invalid(IMPORTS + "def freeze_backbone(model):\n    for p in model.module.backbone.parameters():\n"
                          "        p.requires_grad = False\nddp = DDP(net)\nfreeze_backbone(ddp)\n",
                line=6, column=9),
        # A helper that sets requires_grad to its flag, called with False after the wrap.
        Invalid(IMPORTS + "def set_encoder_grad(model, value):\n    for p in model.module.encoder.parameters():\n"
                          "        p.requires_grad = value\nmodel = DDP(net)\nif warmup:\n"
                          "    set_encoder_grad(model, False)\n", line=9, column=5),
    ]

    def screen(self, sketch):
        """The screen (a DDP wrap here, or a function given DDP models by the project): True, False, or the project facts that must hold."""
        return True if sketch.may_call(names.DDP) else ("receives_ddp",)  # or a function given DDP models

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        if not index.calls_to(names.DDP) and not _receives_ddp_models(index) and not _binds_returned_ddp_models(index):
            return
        for site in index.method_calls("requires_grad_", "to", *_CASTS):
            if site.receiver is not None and _is_modification(index, site) and \
                    _wrapped_and_not_rewrapped(index, site.receiver, site.order) and \
                    not (site.method == "requires_grad_" and _whole_model_toggled(index, site.receiver, site.order)):
                yield self.report(site.node)
        for (_, name), bindings in index.bindings.items():
            for binding in bindings:
                node = self._modifying_assignment(index, name, binding)
                if node is not None:
                    yield self.report(node)
        for site in index.calls:
            if _freezes_through_helper(index, site) or _freezes_collection_through_helper(index, site) \
                    or _reshaping_method_on_inner_model(index, site):
                yield self.report(site.node)

    def _modifying_assignment(self, index: SemanticIndex, name: str, binding) -> Optional[cst.CSTNode]:
        if binding.kind != "assign" or "." not in name or binding.value is None:
            return None
        owner, _, attribute = name.rpartition(".")
        if attribute == "requires_grad" and literal_bool(binding.value) is False:
            loop = index.enclosing(binding.node, cst.For)
            model = _parameters_owner(loop.iter) if loop is not None else None
            if model is not None and _loop_binds(loop.target, owner):
                if _wrapped_and_not_rewrapped(index, model, binding.order) \
                        and not (index.enclosing(binding.node, cst.If) is None
                                 and _whole_model_toggled(index, model, binding.order)):
                    return binding.node
            elif loop is not None and _loop_binds(loop.target, owner) \
                    and _parameters_of_wrapped(index, loop.iter, binding.order):
                # a list of the DDP model's parameters collected after the wrap
                # (``frozen = [p for n, p in named if "text" in n]``)
                return binding.node
            return None
        value = binding.value
        qualified = index.qualified_name(value.func) if isinstance(value, cst.Call) else None
        if qualified and qualified.startswith("torch.nn.") and qualified.split(".")[-1][:1].isupper() \
                and qualified not in (names.DATA_PARALLEL, names.DDP):
            target = binding.node.targets[0].target if isinstance(binding.node, cst.Assign) else None
            if isinstance(target, cst.Attribute) and _wrapped_and_not_rewrapped(index, target.value, binding.order):
                return binding.node
        return None


def _freezes_through_helper(index: SemanticIndex, site: CallSite) -> bool:
    """``set_grad(ddp_model, False)`` where the function of this module sets
    ``requires_grad`` of its model parameter's parameters to its flag parameter."""
    for helper in helper_functions(index, site):
        params = [p.name.value for p in helper.params.params]
        if params and params[0] in ("self", "cls") and isinstance(site.node.func, cst.Attribute):
            params = params[1:]
        for model_param, flag_param in _parameter_freezes(index, helper):
            flag = site.argument(flag_param, params.index(flag_param) if flag_param in params else None)
            model = site.argument(model_param, params.index(model_param) if model_param in params else None)
            if flag is not None and literal_bool(flag.value) is False and model is not None \
                    and _wrapped_and_not_rewrapped(index, model.value, site.order) \
                    and not (_freezes_all_of(index, helper, model_param)
                             and _whole_model_toggled(index, model.value, site.order)):
                return True
    return False


def _whole_model_toggled(index: SemanticIndex, expr: cst.BaseExpression, order: int) -> bool:
    """``D.requires_grad_(False)`` / ``requires_grad(self.discriminator, False)`` on the
    wrapped model itself (or its ``.module``), not a part of it, which the module also
    switches back on (``D.requires_grad_(True)``, ``requires_grad(self.discriminator,
    True)``): a GAN freezes one whole network while the other trains and unfreezes it
    before its own backward. No gradient hook of it fires while it is frozen, so no
    reduction is left half done (a103 Faster-GNGAN, COIGAN). Only for a model this module
    wraps itself."""
    root = wrapped_root(index, expr, order)
    name = dotted_name(expr)
    if root is None or name is None or name not in (root, root + ".module") or not index.calls_to(names.DDP):
        return False  # (a DDP model received from another module stays flagged: REAL-CODE-SHAPES)
    for site in index.calls:
        if site.method == "requires_grad_" and site.receiver is not None and dotted_name(site.receiver) == name \
                and site.node.args and literal_bool(site.node.args[0].value) is True:
            return True
        if any(literal_bool(arg.value) is True for arg in site.node.args) \
                and any(dotted_name(arg.value) == name for arg in site.node.args) \
                and any(_parameter_freezes(index, helper) for helper in helper_functions(index, site)):
            return True
    return False


def _freezes_all_of(index: SemanticIndex, helper: cst.FunctionDef, param: str) -> bool:
    """The helper sets ``requires_grad`` on every parameter of ``param`` itself
    (``for p in model.parameters(): p.requires_grad = flag``, ``model.requires_grad_(flag)``),
    with no test in between."""
    for site in flow_calls(index, helper):
        if site.method == "requires_grad_" and site.receiver is not None and dotted_name(site.receiver) == param \
                and index.enclosing(site.node, cst.If) is None:
            return True
        if site.method in ("parameters", "named_parameters") and site.receiver is not None \
                and dotted_name(site.receiver) == param:
            loop = index.parent(site.node)
            if isinstance(loop, cst.For) and loop.iter is site.node and not any(
                    isinstance(node, cst.If) for node in _statements_in(loop)):
                return True
    return False


def _statements_in(loop: cst.For) -> list[cst.CSTNode]:
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else []
    return list(body)


def _reshaping_method_on_inner_model(index: SemanticIndex, site: CallSite) -> bool:
    """``model.module.expand_heads(n)`` / ``self.net.module.freeze_backbone()``
    after the wrap, where every method of that name in the project's classes
    changes its own module's parameters (assigns a new torch.nn module or
    Parameter to ``self.x``, or freezes ``self``'s parameters): the inner
    model changes behind the reducer."""
    receiver = site.receiver
    if receiver is None or site.method is None or site.method.startswith("__") \
            or not (dotted_name(receiver) or "").endswith(".module"):
        return False
    methods = _project_methods(index).get(site.method)
    if not methods or not all(function.reshapes_self for function in methods):
        return False
    if any(function.reshapes_self == "freeze" for function in methods) and _finds_unused_parameters(index):
        return False  # frozen parameters are found unused and marked ready: no error, nothing to sync
    return _wrapped_and_not_rewrapped(index, receiver, site.order)


def _finds_unused_parameters(index: SemanticIndex) -> bool:
    """Does a DDP wrap of this module pass a literal ``find_unused_parameters=True``?"""
    for site in index.calls_to(names.DDP):
        arg = site.argument("find_unused_parameters")
        if arg is not None and literal_bool(arg.value) is True:
            return True
    return False


def _project_methods(index: SemanticIndex) -> dict:
    """Method name -> the FunctionFacts of every method of that name in the
    project's classes (built once per project)."""
    project = project_of(index)
    found = getattr(project, "_ddp024_methods", None)
    if found is None:
        found = {}
        for module in project.modules.values():
            for key, function in module.functions.items():
                owner, _, method = key.rpartition(".")
                if owner in module.classes:
                    found.setdefault(method, []).append(function)
        try:
            project._ddp024_methods = found
        except AttributeError:
            pass
    return found


def _freezes_collection_through_helper(index: SemanticIndex, site: CallSite) -> bool:
    """``filter_parameters(params, regexp)`` where ``params`` was collected from
    the DDP model's ``named_parameters()`` / ``parameters()`` after the wrap and
    the function of this module sets ``p.requires_grad = False`` on the items it
    walks (also in a nested function it applies to them)."""
    if not any(_parameters_of_wrapped(index, arg.value, site.order) for arg in site.node.args if not arg.star):
        return False
    return any(_sets_requires_grad_false(index, helper) for helper in helper_functions(index, site))


def _parameters_of_wrapped(index: SemanticIndex, expr: cst.BaseExpression, order: int, depth: int = 0) -> bool:
    """A collection of a wrapped model's parameters: ``model.parameters()``, a
    list / comprehension over it, or a name bound to one."""
    if depth > 5:
        return False
    if isinstance(expr, cst.Name):
        return any(_parameters_of_wrapped(index, value, order, depth + 1)
                   for value in index.reaching_values(expr) or ())
    owner = _parameters_owner(expr)
    if owner is not None:
        return _wrapped_and_not_rewrapped(index, owner, order)
    if isinstance(expr, (cst.ListComp, cst.GeneratorExp, cst.SetComp)):
        return any(_parameters_of_wrapped(index, f.iter, order, depth + 1) for f in _generators(expr.for_in))
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("list", "tuple") \
            and len(expr.args) == 1:
        return _parameters_of_wrapped(index, expr.args[0].value, order, depth + 1)
    return False


def _generators(for_in: cst.CompFor) -> list[cst.CompFor]:
    found = []
    while for_in is not None:
        found.append(for_in)
        for_in = for_in.inner_for_in
    return found


def _sets_requires_grad_false(index: SemanticIndex, function: cst.FunctionDef) -> bool:
    """``x.requires_grad = False`` in the function or a function nested in it,
    on a name it receives or walks (a parameter, a loop or unpacking target),
    not on a tensor it creates."""
    for (_, name), bindings in index.bindings.items():
        if not name.endswith(".requires_grad") or name.count(".") != 1:
            continue
        owner = name.split(".")[0]
        for binding in bindings:
            if binding.kind != "assign" or literal_bool(binding.value) is not False \
                    or not any(a is function for a in index.ancestors(binding.node)):
                continue
            made = [b for b in index.reaching(owner, binding.node)
                    if b.kind in ("assign", "annassign") and isinstance(b.value, cst.Call)]
            if owner not in ("self", "cls") and not made:
                return True
    return False


def _parameter_freezes(index: SemanticIndex, function: cst.FunctionDef) -> list[tuple[str, str]]:
    """(model parameter, flag parameter) pairs of a function that does
    ``for p in model.x.parameters(): p.requires_grad = flag`` or
    ``model.x.requires_grad_(flag)``."""
    key = ("ddp024.freezes", id(function))
    if key in index.cache:
        return index.cache[key]
    params = {p.name.value for p in function.params.params}
    found = []
    flags = index.cache.get("ddp024.requires_grad")
    if flags is None:
        flags = index.cache["ddp024.requires_grad"] = [
            (name, bindings) for (_, name), bindings in index.bindings.items() if name.endswith(".requires_grad")]
    for name, bindings in flags:
        for binding in bindings:
            if binding.kind != "assign" or not isinstance(binding.value, cst.Name) \
                    or binding.value.value not in params or index.enclosing_scope(binding.node) is not function:
                continue
            loop = index.enclosing(binding.node, cst.For)
            model = _parameters_owner(loop.iter) if loop is not None else None
            head = (dotted_name(model) or "").split(".")[0] if model is not None else ""
            if head in params and _loop_binds(loop.target, name.rpartition(".")[0]):
                found.append((head, binding.value.value))
    for site in index.method_calls("requires_grad_"):
        if site.scope is function and site.receiver is not None and len(site.node.args) == 1:
            head = (dotted_name(site.receiver) or "").split(".")[0]
            flag = site.node.args[0].value
            if head in params and isinstance(flag, cst.Name) and flag.value in params:
                found.append((head, flag.value))
    index.cache[key] = found
    return found


def _binds_returned_ddp_models(index: SemanticIndex) -> bool:
    """Does this module bind a DDP model a project function returns (``self.netG =
    self.set_device(networks.define_G(opt))`` with the wrap inside ``define_G``; a114 IDM)?"""
    return any(b.kind == "assign" and isinstance(b.value, cst.Call) and returned_wrap(index, b.value) == "ddp"
               for bindings in index.bindings.values() for b in bindings)


def _receives_ddp_models(index: SemanticIndex) -> bool:
    """Does some function of this module receive a DDP model from a call site
    of the project (``freeze(model)`` after ``model = DDP(net)`` elsewhere)?"""
    project = project_of(index)
    return any(kind == "ddp" for (path, _), params in project.ddp_params.items() if path == index.path
               for kind in params.values())


def _is_modification(index: SemanticIndex, site: CallSite) -> bool:
    if site.method == "requires_grad_":
        arg = site.node.args[0].value if site.node.args else None
        return arg is not None and literal_bool(arg) is False
    if site.method in _CASTS:
        return not site.node.args
    for arg in site.node.args:  # .to(torch.float16) / .to(dtype=...)
        qualified = index.qualified_name(arg.value) or ""
        if qualified.startswith("torch.") and qualified.split(".")[-1] in _DTYPES:
            return True
    return False


def _wrapped_and_not_rewrapped(index: SemanticIndex, expr: cst.BaseExpression, order: int) -> bool:
    root = wrapped_root(index, expr, order)
    if root is None:
        return False
    inner = root.split(".module")[0]
    if _never_runs_backward(index, inner) or _given_only_models_without_backward(index, expr, inner):
        return False
    for site in index.calls_to(names.DDP):
        module = site.argument("module", 0)
        if site.order > order and module is not None and dotted_name(module.value) in (root, inner):
            return False  # wrapped again after the change
    return True


def _never_runs_backward(index: SemanticIndex, name: str) -> bool:
    """A wrapped model whose every forward in this module runs with autograd
    off (a momentum / EMA target network: ``with torch.no_grad(): target(x)``):
    it never runs backward, so its reducer never reduces."""
    key = ("ddp024.no_backward", name)
    if key not in index.cache:
        forwards = [site for site in index.calls if dotted_name(site.node.func) in (name, name + ".module")]
        index.cache[key] = bool(forwards) and all(grad_mode(index, site.node) == "off" for site in forwards)
    return index.cache[key]


def _given_only_models_without_backward(index: SemanticIndex, expr: cst.BaseExpression, name: str) -> bool:
    """``def switch_off_grad(self, model): for p in model.parameters(): ...``
    where ``model`` is a parameter of the function and every call of it in this
    module passes a DDP model that never runs backward (``self.model_wind``
    whose forwards all run under ``torch.no_grad()``): nothing to reduce."""
    from ddplint.analysis.flow import callers

    if "." in name:
        return False
    function = index.enclosing_scope(expr)
    if not isinstance(function, cst.FunctionDef):
        return False
    params = [p.name.value for p in function.params.params]
    if name not in params:
        return False
    sites = callers(index, function)
    if not sites:
        return False
    if params and params[0] in ("self", "cls") and isinstance(sites[0].node.func, cst.Attribute):
        params = params[1:]
    for site in sites:
        arg = site.argument(name, params.index(name) if name in params else None)
        passed = dotted_name(arg.value) if arg is not None else None
        if passed is None or not _never_runs_backward(index, passed.split(".module")[0]):
            return False
    return True


def _parameters_owner(expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The module whose ``parameters()`` a loop walks: ``model.module.head`` of
    ``model.module.head.parameters()``, and the module list of one of its items
    (``model.module.blocks`` of ``model.module.blocks[i].parameters()``)."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
            and expr.func.attr.value in ("parameters", "named_parameters"):
        owner = expr.func.value
        while isinstance(owner, cst.Subscript):
            owner = owner.value
        return owner
    return None


def _loop_binds(target: cst.BaseExpression, name: str) -> bool:
    if isinstance(target, cst.Tuple):
        return any(dotted_name(e.value) == name for e in target.elements)
    return dotted_name(target) == name
