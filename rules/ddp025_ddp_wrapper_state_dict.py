"""## What it does
Flags the `state_dict()` of a `DistributedDataParallel` wrapper that is saved:
`torch.save(ddp_model.state_dict(), ...)`, also inside the saved object
(`{"model": ddp_model.state_dict()}`, `dict(step=s, w=ddp_model.state_dict())`,
`ckpt["model"] = ddp_model.state_dict()`) and through save helpers
(`write_ckpt({"net": ddp_model.state_dict()}, out)`: a function of the project
that `torch.save`s what it is given, or, when its body is not visible, a call
named like a save). The model may be wrapped on one branch only
(`if args.distributed: model = DDP(model)`), conditionally
(`DDP(m) if cuda else m`), or be a parameter that the project's callers fill
with a DDP model; a wrap made under a flag the save contradicts
(`if cfg.eval_only: net = DDP(m) else: net = FSDP(m)`, the save under
`if not cfg.eval_only:` or after `if cfg.eval_only: break`) does not reach it. Each `state_dict()` call is reported once, however many
saves write it.

Fix (unsafe): `ddp_model.state_dict()` becomes `ddp_model.module.state_dict()`,
offered only where the name always holds the wrapper (not for a conditional
wrap, a wrap on one branch, or a parameter). Unsafe: the checkpoint's keys
change, and code that loads it back into the DDP wrapper must then load into
`ddp_model.module`.

A checkpoint that only the training script's own resume loads back into the
DDP wrapper is still flagged (RULES.md exempts loaders that strip the prefix):
the keys match there, but the file does not load into a plain model for
inference or fine-tuning.

Not flagged: a wrapper's state dict saved beside the module's in the same object
(`{"state_dict": m.state_dict(), "best_state_dict": m.module.state_dict()}`: the plain
weights are there for plain loaders, the wrapper's for the resume);
`ddp_model.module.state_dict()` (also through
`raw = m.module if hasattr(m, "module") else m`, an `isinstance(m, DDP)`
test, or the `except` fallback of `try: sd = m.module.state_dict()`); the arm
of `if cfg.distributed: sd = m.module.state_dict() else: sd = m.state_dict()`
without `.module` (the test chose between wrapper and model; still flagged when
the test is `isinstance(m, nn.DataParallel)`, which a DDP model fails);
`torch.save(ddp_model)` (the whole object); `self.model.state_dict()` of a class whose
constructor unwraps what it is given (`if isinstance(model, DDP): model = model.module`
before `self.model = model`: a checkpointer); keys rewritten before the
save; checkpoints whose loaders strip the `module.` prefix
(`consume_prefix_in_state_dict_if_present`, `k.replace("module.", "")`,
`k[7:]`, `'.'.join(k.split('.')[1:])`, `k[len("module.encoder."):]`).
The strip must rewrite THIS checkpoint, anywhere in the project: a
load of a file whose name can match, of the key the state dict is saved under,
or of a path chosen at run time (a parameter), or the strip of the evaluation
script in the saving script's folder (`test_x.py` / `eval_x.py` next to
`train_x.py`, whose weights path is a placeholder); a strip of pretrained or
teacher weights, of another file, of parameter names, or of a live model's
`state_dict()` handed to a comparison helper (`sanity_check(model.state_dict(),
path)`) does not count, except in a pretraining script (`pretrain_*.py`), whose
checkpoint is what the "pretrained" loaders read, and except a strip of the wrapper's
prefix and a submodule's (`k[len("module.encoder_q."):]`) from the entry the state dict
is saved under (`checkpoint["state_dict"]`): weights saved from a DDP model with that
submodule, i.e. this checkpoint (MoCo's linear evaluation). A loader that takes an entry
on one branch (`if "model" in ckpt: ckpt = ckpt["model"]`) strips that entry too.

## Why is this bad?
The wrapper's state dict prefixes every key with `module.`. Loading the
checkpoint into a plain model (for evaluation, export, fine-tuning on one GPU)
then fails with "Missing key(s) ... Unexpected key(s) module.", or worse, with
`strict=False`, silently loads nothing.

## Example
    model = DDP(model, device_ids=[local_rank])
    torch.save(model.state_dict(), "ckpt.pt")

## Use instead
    torch.save(model.module.state_dict(), "ckpt.pt")

## References
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
- https://pytorch.org/docs/stable/generated/torch.nn.modules.utils.consume_prefix_in_state_dict_if_present.html
"""

from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import PurePosixPath
from typing import Iterator, Optional

import libcst as cst

from ddplint import names
from ddplint.analysis.flow import helper_functions, precedes
from ddplint.analysis.models import checkpoint_file_name, linked_modules, project_callee, project_of, wrapped_kind
from ddplint.analysis.semantic import CallSite, SemanticIndex, dotted_name
from ddplint.analysis.values import is_ddp_model, literal_str, opposite_arm_unwraps
from ddplint.fixes import UNSAFE, insert_after, node_fix
from ddplint.rule import Invalid, Report, Rule, Valid

DDP_SCRIPT = ("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "model = DDP(model, device_ids=[local_rank])\n")


DICT_CALL = DDP_SCRIPT + "torch.save(dict(step=step, w=model.state_dict()), 'ckpt.pt')\n"
STORED = DDP_SCRIPT + "ckpt = {}\nckpt['model'] = model.state_dict()\ntorch.save(ckpt, path)\n"
LOCAL_HELPER = (DDP_SCRIPT + "import os\ndef write_ckpt(state, d):\n    torch.save(state, os.path.join(d, 'ckpt.pt'))\n"
                "write_ckpt({'net': model.state_dict(), 'step': step}, out)\n")
HIDDEN_HELPER = DDP_SCRIPT + "from ckpt_utils import write_ckpt\nwrite_ckpt({'net': model.state_dict()}, out)\n"
METHOD_HELPER = (DDP_SCRIPT + "class Checkpointer:\n    def write(self, state, path):\n"
                 "        torch.save(state, path)\nckpt = Checkpointer()\n"
                 "ckpt.write({'m': model.state_dict()}, 'm.pt')\n")
TWO_SAVES = DDP_SCRIPT + "sd = model.state_dict()\ntorch.save(sd, 'last.pt')\nif is_best:\n    torch.save(sd, 'best.pt')\n"
PRETRAINED_STRIP = (DDP_SCRIPT + "sd = torch.load(args.pretrained, map_location='cpu')\n"
                    "net.load_state_dict({k.replace('module.', ''): v for k, v in sd.items()})\n"
                    "torch.save(model.state_dict(), 'ckpt.pt')\n")
NAMES_STRIP = (DDP_SCRIPT + "for n, p in model.named_parameters():\n    print(n.replace('module.', ''))\n"
               "torch.save(model.state_dict(), 'ckpt.pt')\n")
TEACHER_STRIP = (DDP_SCRIPT + "torch.save(model.state_dict(), 'ckpt.pt')\n"
                 "def load_teacher(net):\n    sd = torch.load('teacher.pt', map_location='cpu')\n"
                 "    net.load_state_dict({k[7:]: v for k, v in sd.items()})\n")

POLICIES = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, models, device_id):
        self.models = {}
        for policy, model in models.items():
            self.models[policy] = DDP(model.cuda(), device_ids=[device_id])

    def save_model_checkpoint(self, folder):
        for policy, model in self.models.items():
            torch.save(model.state_dict(), f"{folder}/{policy}.state_dict")
"""
RESUMED_PLAIN = ("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                 "def fit(cfg, net):\n    if cfg.resume:\n        state = torch.load(cfg.resume, map_location='cpu')\n"
                 "        net.load_state_dict(state['weights'])\n    model = DDP(net.cuda())\n"
                 "    for ep in range(cfg.epochs):\n        run_epoch(model)\n"
                 "        torch.save({'weights': model.state_dict(), 'ep': ep}, cfg.out)\n")

RESUMED_WRAPPER = ("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                   "def fit(cfg, net):\n    model = DDP(net.cuda())\n    if cfg.resume:\n"
                   "        state = torch.load(cfg.resume, map_location='cpu')\n"
                   "        model.load_state_dict(state['weights'])\n    for ep in range(cfg.epochs):\n"
                   "        run_epoch(model)\n        torch.save({'weights': model.state_dict(), 'ep': ep}, cfg.out)\n")

# A strip of the live weights' keys, to compare them with a reference file: no loader of the checkpoint.
COMPARE_STRIP = (DDP_SCRIPT + "def compare(weights, reference_path):\n"
                 "    ref = torch.load(reference_path, map_location='cpu')\n    for k in list(weights.keys()):\n"
                 "        name = k[len('module.'):] if k.startswith('module.') else k\n"
                 "        assert torch.equal(weights[k].cpu(), ref[name])\n"
                 "torch.save({'state_dict': model.state_dict()}, 'last.pth')\n"
                 "compare(model.state_dict(), args.reference)\n")


def _module(source: str) -> str:
    """The example's source after the fix: ``model.state_dict()`` of the saved
    wrapper becomes ``model.module.state_dict()``."""
    return source.replace("model.state_dict()", "model.module.state_dict()", 1)


class DDPWrapperStateDict(Rule):
    code, name, severity = "DDP025", "ddp-wrapper-state-dict", "info"
    message = ("state_dict() of the DDP wrapper: every key gets a 'module.' prefix and will not load "
               "into a plain model; save model.module.state_dict()")
    triggers = ("state_dict",)
    needs_ddp_context = True

    valid = [
        # The checkpointer unwraps the model it is given before storing it (a95 dlengine).
        Valid("import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel\n"
              "class Checkpointer:\n    def __init__(self, model, save_dir):\n"
              "        if isinstance(model, DistributedDataParallel):\n            model = model.module\n"
              "        self.model = model\n        self.save_dir = save_dir\n    def save(self, name):\n"
              "        data = {'model': self.model.state_dict()}\n"
              "        torch.save(data, f'{self.save_dir}/{name}.pth')\n"
              "model = DistributedDataParallel(Net().cuda())\nckpt = Checkpointer(model, 'out')\n"
              "if dist.get_rank() == 0:\n    ckpt.save('last')\n"),
        # Saved only where the mode test says the model was not wrapped (a75 TotalSegmentatorProj).
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nclass Trainer:\n"
              "    def setup(self, gpu_id):\n        model = Net().to(gpu_id)\n        if self.mode == 'DDP':\n"
              "            self.model = DDP(model, device_ids=[gpu_id])\n"
              "        else:\n            self.model = model\n"
              "    def train(self):\n        if self.mode != 'DDP':\n"
              "            torch.save({'model': self.model.state_dict()}, 'ckpt.pt')\n"),
        # The module's weights saved beside the wrapper's, in the same checkpoint (a71 DEKR).
        Valid(DDP_SCRIPT + "torch.save({'epoch': 3, 'state_dict': model.state_dict(),\n"
                           "            'best_state_dict': model.module.state_dict()}, 'checkpoint.pth')\n"),
        # The wrapper is thrown away right after the wrap: the attribute holds the plain model (a62).
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "class Trainer:\n    def __init__(self, model, gpu):\n"
              "        self.model = DDP(model.to(gpu), device_ids=[gpu])\n        self.model = self.model.module\n"
              "    def save(self, epoch):\n        torch.save({'model': self.model.state_dict(), 'epoch': epoch}, 'ckpt.pt')\n"),
        # "Pretrained" weights read from the entry the wrapper's state is saved under and stripped of
        # "module.encoder_q.": a loader of THIS checkpoint (MoCo's linear evaluation, a61).
        Valid(DDP_SCRIPT + "sd = torch.load(args.pretrained, map_location='cpu')['state_dict']\n"
                           "net.load_state_dict({k[len('module.encoder_q.'):]: v for k, v in sd.items()})\n"
                           "torch.save({'state_dict': model.state_dict(), 'epoch': 1}, 'ckpt.pt')\n"),
        # A pretraining script: the "pretrained" weights other code loads (and strips) are its checkpoint.
        Valid(DDP_SCRIPT + "torch.save({'state_dict': model.state_dict()}, 'ckpt_last.pth')\n"
                           "def load_for_probe(net, cfg):\n"
                           "    sd = torch.load(cfg.pretrained, map_location='cpu')['state_dict']\n"
                           "    net.load_state_dict({k[len('module.'):]: v for k, v in sd.items()})\n",
              filename="pretrain_contrast.py"),
        # The loader takes the checkpoint's 'model' entry when there is one (``ckpt = ckpt['model']``
        # on one branch) and strips the prefix of what it holds.
        Valid(DDP_SCRIPT + "def store(net, opt, path):\n"
                           "    torch.save({'model': net.state_dict(), 'opt': opt.state_dict()}, path)\n"
                           "def restore(path, net):\n    ckpt = torch.load(path, map_location='cpu')\n"
                           "    if 'model' in ckpt:\n        ckpt = ckpt['model']\n"
                           "    clean = {}\n    for k, v in ckpt.items():\n"
                           "        clean[k.replace('module.', '')] = v\n    net.load_state_dict(clean)\n"
                           "store(model, optimizer, 'run/last.pt')\n"),
        # A loader that keeps one submodule of the wrapper's checkpoint (``k[len('module.trunk.'):]``).
        Valid(DDP_SCRIPT + "torch.save({'model': model.state_dict()}, args.out)\n"
                           "def load_trunk(trunk, path):\n    sd = torch.load(path, map_location='cpu')['model']\n"
                           "    trunk.load_state_dict({k[len('module.trunk.'):]: v for k, v in sd.items()\n"
                           "                           if k.startswith('module.trunk.')})\n"),
        # Unwrapped under the same distributed flag the wrap depends on.
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "def save_weights(model, cfg):\n    if cfg.distributed:\n        model = model.module\n"
              "    torch.save(model.state_dict(), cfg.out)\n"
              "def main(cfg, net):\n    if cfg.distributed:\n        net = DDP(net)\n    save_weights(net, cfg)\n"),
        Valid(DDP_SCRIPT + "torch.save(model.module.state_dict(), 'ckpt.pt')\n"),
        Valid(DDP_SCRIPT + "torch.save(model, 'whole.pt')\n"),
        Valid(DDP_SCRIPT + "raw = model.module\ntorch.save({'model': raw.state_dict()}, path)\n"),
        Valid(DDP_SCRIPT + "torch.save(model.state_dict(), path)\n"
              "def load(net, path):\n    sd = torch.load(path, map_location='cpu')\n"
              "    net.load_state_dict({k.replace('module.', ''): v for k, v in sd.items()})\n"),
        Valid(DDP_SCRIPT + "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\n"
              "torch.save(model.state_dict(), path)\n"),
        Valid("import torch\nnet = Net()\ntorch.save(net.state_dict(), 'net.pt')\n"),
        Valid(DDP_SCRIPT + "torch.save(optimizer.state_dict(), 'opt.pt')\n"),
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "def save(model, path):\n    torch.save(model.state_dict(), path)\n"),
        # The loader of this very file strips the prefix.
        Valid(DDP_SCRIPT + "torch.save(model.state_dict(), 'ckpt.pt')\n"
              "def evaluate(net):\n    sd = torch.load('ckpt.pt', map_location='cpu')\n"
              "    net.load_state_dict({k[7:]: v for k, v in sd.items()})\n"),
        # ... cutting each key's first dotted part, whatever it is called (a71 TDN's test scripts).
        Valid(DDP_SCRIPT + "torch.save({'state_dict': model.state_dict()}, 'ckpt.pt')\n"
              "def evaluate(net):\n    sd = torch.load('ckpt.pt', map_location='cpu')['state_dict']\n"
              "    net.load_state_dict({'.'.join(k.split('.')[1:]): v for k, v in sd.items()})\n"),
        # The loader of this file gives plain keys the wrapper's prefix (it loads into a DDP model).
        Valid(DDP_SCRIPT + "torch.save({'model': model.state_dict(), 'epoch': ep}, 'best.pt')\n"
              "def evaluate(net):\n    sd = torch.load('best.pt', map_location='cpu')['model']\n"
              "    sd = {k if 'module.' in k else 'module.' + k: v for k, v in sd.items()}\n"
              "    DDP(net).load_state_dict(sd)\n"),
        # ... or the loader of this key of the checkpoint (the file is chosen at run time).
        Valid(DDP_SCRIPT + "from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present as strip\n"
              "torch.save({'model': model.state_dict(), 'epoch': ep}, f'{out}/ckpt_{ep}.pt')\n"
              "def resume(net, path):\n    ckpt = torch.load(path, map_location='cpu')\n"
              "    strip(ckpt['model'], 'module.')\n    net.load_state_dict(ckpt['model'])\n"),
        # The keys are rewritten before the save.
        Valid(DDP_SCRIPT + "torch.save({k[7:]: v for k, v in model.state_dict().items()}, 'ckpt.pt')\n"),
        # The unwrapped model on the arm where the model is not the wrapper.
        Valid(DDP_SCRIPT + "sd = model.module.state_dict() if isinstance(model, DDP) else model.state_dict()\n"
              "torch.save(sd, 'ckpt.pt')\n"),
        Valid(DDP_SCRIPT + "raw = model.module if hasattr(model, 'module') else model\n"
              "torch.save(raw.state_dict(), 'ckpt.pt')\n"),
        # The helper unwraps the DDP model its callers pass before saving.
        Valid(DDP_SCRIPT + "def save_checkpoint(filename, model, rank=0):\n    if rank != 0:\n        return\n"
              "    if isinstance(model, DDP):\n        model = model.module\n"
              "    torch.save({'model': model.state_dict()}, filename)\n"
              "save_checkpoint('ckpt.pt', model, rank)\n"),
        # Helpers: one that does not save, and the inner model handed to a save helper.
        Valid(DDP_SCRIPT + "def log_weights(sd):\n    print(len(sd))\nlog_weights(model.state_dict())\n"),
        Valid(DDP_SCRIPT + "from ckpt_utils import write_ckpt\nwrite_ckpt({'net': model.module.state_dict()}, out)\n"),
        # DDP only when evaluating; the saves run only when training (FSDP keys carry no 'module.').
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
              "if cfg.eval_only:\n    net = DDP(model)\nelse:\n    net = FSDP(model)\n"
              "for epoch in range(3):\n    if cfg.eval_only:\n        break\n"
              "    if not cfg.eval_only and not cfg.debug:\n        sd = net.state_dict()\n"
              "        torch.save(sd, f'ep{epoch}.pt')\n"),
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
              "if cfg.eval_only:\n    net = DDP(model)\nelse:\n    net = FSDP(model)\n"
              "for epoch in range(3):\n    if cfg.eval_only:\n        break\n"
              "    torch.save(net.state_dict(), 'last.pt')\n"),
        Valid(DDP_SCRIPT + "from ckpt_utils import load_ckpt\nload_ckpt(model.state_dict(), 'ckpt.pt')\n"),
        # The test chose between the wrapper's .module and the model: the other arm's alias is the plain model.
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "class Trainer:\n    def __init__(self, net, cfg):\n        self.gen = net.cuda()\n"
              "        if cfg.distributed:\n            self.gen = DDP(self.gen)\n"
              "    def save(self, path):\n        if isinstance(self.gen, DDP):\n            gen = self.gen.module\n"
              "        else:\n            gen = self.gen\n        torch.save({'gen': gen.state_dict()}, path)\n"),
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "model = DDP(net) if args.multi_gpu else net\n"
              "def save(model, args, path):\n    if args.multi_gpu:\n        plain = model.module\n"
              "    else:\n        plain = model\n    torch.save(plain.state_dict(), path)\n"
              "save(model, args, 'last.pt')\n"),
        # The fallback of a ``try`` that takes ``.module`` first: it runs only when the model is not the wrapper.
        Valid(DDP_SCRIPT + "blob = {'epoch': ep}\ntry:\n    blob['net'] = model.module.state_dict()\n"
                           "except AttributeError:\n    blob['net'] = model.state_dict()\ntorch.save(blob, 'last.pth')\n"),
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "class Fitter:\n    def __init__(self, net):\n        self.net = DDP(net)\n"
              "    def dump(self, path):\n        try:\n            weights = self.net.module.state_dict()\n"
              "        except:\n            weights = self.net.state_dict()\n        torch.save(weights, path)\n"),
        Valid(DDP_SCRIPT + "try:\n    plain = model.module\nexcept Exception:\n    plain = model\n"
                           "torch.save({'model': plain.state_dict()}, 'ckpt.pt')\n"),
        Valid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "class Runner:\n    def __init__(self, net, args):\n        self.args, self.model = args, net\n"
              "        if args.multi_gpu:\n            self.model = DDP(net)\n"
              "    def end_epoch(self, path):\n        if self.args.multi_gpu:\n"
              "            weights = self.model.module.state_dict()\n        else:\n"
              "            weights = self.model.state_dict()\n        torch.save(weights, path)\n"),
    ]
    invalid = [
        # A dict of policies whose entries are wrapped one by one: the saved values are the
        # wrappers (a118 warp-drive).
        Invalid(POLICIES, line=13, column=24),
        # The test tells DataParallel apart: a DDP model takes the other arm, with its prefixed keys.
        Invalid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "def save(model, path):\n    if isinstance(model, torch.nn.DataParallel):\n"
                "        torch.save(model.module.state_dict(), path)\n    else:\n"
                "        torch.save(model.state_dict(), path)\n"
                "model = DDP(net)\nsave(model, 'last.pt')\n", line=7, column=20),
        # An unwrapping arm elsewhere does not cover a save of the wrapper itself.
        Invalid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "class Trainer:\n    def __init__(self, net):\n        self.model = DDP(net.cuda())\n"
                "    def save(self, cfg, path):\n        if cfg.distributed:\n            plain = self.model.module\n"
                "        else:\n            plain = self.model\n"
                "        torch.save({'ema': plain.state_dict(), 'model': self.model.state_dict()}, path)\n",
                line=11, column=57,
                fixed="import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "class Trainer:\n    def __init__(self, net):\n        self.model = DDP(net.cuda())\n"
                "    def save(self, cfg, path):\n        if cfg.distributed:\n            plain = self.model.module\n"
                "        else:\n            plain = self.model\n"
                "        torch.save({'ema': plain.state_dict(), 'model': self.model.module.state_dict()}, path)\n"),
        # Resumed into the plain network before the wrap: the prefixed keys do not match.
        Invalid(RESUMED_PLAIN, line=10, column=32, fixed=_module(RESUMED_PLAIN)),
        # Resumed into the wrapper: the keys match there, but the file loads into no plain model.
        Invalid(RESUMED_WRAPPER, line=10, column=32, fixed=_module(RESUMED_WRAPPER)),
        Invalid(DDP_SCRIPT + "torch.save(model.state_dict(), 'ckpt.pt')\n", line=4, column=12,
                fixed=DDP_SCRIPT + "torch.save(model.module.state_dict(), 'ckpt.pt')\n"),
        Invalid(DDP_SCRIPT + "torch.save({'epoch': epoch, 'model': model.state_dict(),\n"
                "            'optimizer': optimizer.state_dict()}, path)\n", line=4, column=38,
                fixed=DDP_SCRIPT + "torch.save({'epoch': epoch, 'model': model.module.state_dict(),\n"
                "            'optimizer': optimizer.state_dict()}, path)\n"),
        Invalid(DDP_SCRIPT + "checkpoint = {'model': model.state_dict(), 'step': step}\n"
                "torch.save(checkpoint, path)\n", line=4, column=24,
                fixed=DDP_SCRIPT + "checkpoint = {'model': model.module.state_dict(), 'step': step}\n"
                "torch.save(checkpoint, path)\n"),
        Invalid("import torch\nimport torch.nn as nn\nnet = nn.parallel.DistributedDataParallel(net)\n"
                "if rank == 0:\n    torch.save(net.state_dict(), f'{out}/net.pt')\n", line=5, column=16,
                fixed="import torch\nimport torch.nn as nn\nnet = nn.parallel.DistributedDataParallel(net)\n"
                "if rank == 0:\n    torch.save(net.module.state_dict(), f'{out}/net.pt')\n"),
        Invalid("import torch\nfrom torch.nn.parallel import DistributedDataParallel\n"
                "class Trainer:\n    def __init__(self, model):\n"
                "        self.model = DistributedDataParallel(model)\n"
                "    def save(self, path):\n        torch.save(self.model.state_dict(), path)\n",
                line=7, column=20,
                fixed="import torch\nfrom torch.nn.parallel import DistributedDataParallel\n"
                "class Trainer:\n    def __init__(self, model):\n"
                "        self.model = DistributedDataParallel(model)\n"
                "    def save(self, path):\n        torch.save(self.model.module.state_dict(), path)\n"),
        Invalid(DDP_SCRIPT + "for epoch in range(10):\n    train(model)\n"
                "    torch.save(model.state_dict(), f'epoch{epoch}.pt')\n", line=6, column=16,
                fixed=DDP_SCRIPT + "for epoch in range(10):\n    train(model)\n"
                "    torch.save(model.module.state_dict(), f'epoch{epoch}.pt')\n"),
        Invalid("from torch import save\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "ddp = DDP(net)\nsave(ddp.state_dict(), 'x.pt')\n", line=4, column=6,
                fixed="from torch import save\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "ddp = DDP(net)\nsave(ddp.module.state_dict(), 'x.pt')\n"),
        Invalid(DICT_CALL, line=4, column=30, fixed=_module(DICT_CALL)),
        Invalid(STORED, line=5, column=17, fixed=_module(STORED)),
        # Through a save helper of this module, and one whose body is not visible.
        Invalid(LOCAL_HELPER, line=7, column=20, fixed=_module(LOCAL_HELPER)),
        Invalid(HIDDEN_HELPER, line=5, column=20, fixed=_module(HIDDEN_HELPER)),
        Invalid(METHOD_HELPER, line=8, column=18, fixed=_module(METHOD_HELPER)),
        # A parameter that the callers fill with a DDP model (no fix: other callers may pass a plain model).
        Invalid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "def save(model, path):\n    torch.save(model.state_dict(), path)\n"
                "ddp = DDP(net)\nsave(ddp, 'm.pt')\n", line=4, column=16),
        # A conditional wrap; a wrap on one branch (no fix: '.module' breaks the other path).
        Invalid("import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "model = DDP(net) if dist.is_initialized() else net\ntorch.save(model.state_dict(), 'm.pt')\n",
                line=5, column=12),
        Invalid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "if args.distributed:\n    model = DDP(model, device_ids=[args.gpu])\n"
                "torch.save({'model': model.state_dict()}, 'm.pt')\n", line=5, column=22),
        Invalid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "if use_ddp:\n    net = DDP(net.cuda())\nelse:\n    net = net.cuda()\n"
                "torch.save(net.state_dict(), 'net.pt')\n", line=7, column=12),
        # A save helper builds its blob from the DDP model its caller passes in (store(ep, ddp, opt)).
        Invalid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                "def store(ep, m, opt):\n    blob = {'ep': ep, 'model': m.state_dict(), 'opt': opt.state_dict()}\n"
                "    torch.save(blob, f'ck_{ep}.pt')\n"
                "for ep in range(3):\n    store(ep, DDP(net), opt)\n", line=4, column=32),
        # A [7:] cut of a string elsewhere is no 'module.' strip.
        Invalid(DDP_SCRIPT + "def block_name(kind):\n    return kind[7:] if kind.startswith('Sparse_') else kind\n"
                "torch.save({'state_dict': model.state_dict()}, 'ckpt.pt')\n", line=6, column=27,
                fixed=_module(DDP_SCRIPT + "def block_name(kind):\n    return kind[7:] if kind.startswith('Sparse_') else kind\n"
                              "torch.save({'state_dict': model.state_dict()}, 'ckpt.pt')\n")),
        # The save runs when the DDP arm ran.
        Invalid("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
              "if cfg.eval_only:\n    net = DDP(model)\nelse:\n    net = FSDP(model)\n"
                "if cfg.eval_only:\n    torch.save(net.state_dict(), 'eval.pt')\n", line=9, column=16),
        # A handler of a ``try`` that never took ``.module`` (of this model) is no unwrapping fallback.
        Invalid(DDP_SCRIPT + "try:\n    sd = ema.module.state_dict()\nexcept AttributeError:\n"
                "    sd = model.state_dict()\ntorch.save(sd, 'w.pt')\n", line=7, column=10,
                fixed=_module(DDP_SCRIPT + "try:\n    sd = ema.module.state_dict()\nexcept AttributeError:\n"
                              "    sd = model.state_dict()\ntorch.save(sd, 'w.pt')\n")),
        Invalid(DDP_SCRIPT + "try:\n    torch.save(model.state_dict(), 'w.pt')\nexcept OSError:\n    pass\n",
                line=5, column=16,
                fixed=_module(DDP_SCRIPT + "try:\n    torch.save(model.state_dict(), 'w.pt')\nexcept OSError:\n    pass\n")),
        # One report for one state_dict() call, however many saves write it.
        Invalid(TWO_SAVES, line=4, column=6, fixed=_module(TWO_SAVES)),
        # The module strips the prefix of other weights (pretrained, parameter names), not of this checkpoint.
        Invalid(PRETRAINED_STRIP, line=6, column=12, fixed=_module(PRETRAINED_STRIP)),
        Invalid(NAMES_STRIP, line=6, column=12, fixed=_module(NAMES_STRIP)),
        Invalid(TEACHER_STRIP, line=4, column=12, fixed=_module(TEACHER_STRIP)),
        Invalid(COMPARE_STRIP, line=9, column=27, fixed=_module(COMPARE_STRIP)),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return "state_dict" in sketch.calls

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        reported: set[int] = set()
        for objects, target in _saves(index):
            name = checkpoint_file_name(index, target) if target is not None else ""
            for obj in objects:
                calls = list(_state_dict_calls(index, obj))
                unwrapped = {dotted_name(call.receiver.value) for call, _ in calls
                             if isinstance(call.receiver, cst.Attribute) and call.receiver.attr.value == "module"}
                for call, key in calls:
                    if id(call.node) in reported or call.receiver is None:
                        continue
                    if dotted_name(call.receiver) in unwrapped - {None}:
                        continue  # ``{"state_dict": m.state_dict(), "best_state_dict": m.module.state_dict()}``
                    if wrapped_kind(index, call.receiver, call.order) != "ddp":
                        continue
                    receiver = dotted_name(call.receiver)
                    if receiver is not None and opposite_arm_unwraps(index, call.node, receiver):
                        continue  # ``if distributed: m.module.state_dict() else: m.state_dict()``
                    if _loaders_strip(index, name, _text(index, target), key):
                        continue
                    reported.add(id(call.node))
                    receiver = dotted_name(call.receiver)
                    fix = node_fix("Save the wrapped module's state_dict (.module.state_dict())", UNSAFE,
                                   insert_after(call.receiver, ".module")) \
                        if _always_wrapped(index, call.receiver, call.order) else None
                    yield self.report(call.node, None if receiver is None else (
                        f"state_dict() of the DDP wrapper {receiver}: every key gets a 'module.' prefix "
                        f"and will not load into a plain model; save {receiver}.module.state_dict()"), fix=fix)


def _always_wrapped(index: SemanticIndex, expr: cst.BaseExpression, order: int) -> bool:
    """Does every binding that may reach ``expr`` hold the wrapper (so that
    ``.module`` is right on every path)? Not a conditional wrap, a wrap on one
    branch, or a parameter."""
    if isinstance(expr, cst.Call):
        return is_ddp_model(index, expr, order) and not isinstance(expr, cst.IfExp)
    name = dotted_name(expr)
    if name is None:
        return False
    bindings = index.reaching(name, expr)
    return bool(bindings) and all(
        b.kind in ("assign", "annassign") and b.value is not None and not isinstance(b.value, cst.IfExp)
        and is_ddp_model(index, b.value, order) and _on_every_path_to(index, b.node, expr) for b in bindings)


def _on_every_path_to(index: SemanticIndex, binding: cst.CSTNode, use: cst.CSTNode) -> bool:
    """Is the binding not on a branch or loop the use may run without
    (``if args.distributed: model = DDP(model)``)? A binding in another
    function (``self.model = DDP(...)`` in ``__init__``) must not be on a
    branch of that function."""
    around_use = {id(a) for a in index.ancestors(use)}
    for ancestor in index.ancestors(binding):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.Module)):
            return True
        if isinstance(ancestor, (cst.If, cst.IfExp, cst.For, cst.While, cst.Try)) and id(ancestor) not in around_use:
            return False
    return True


def _text(index: SemanticIndex, expr) -> str:
    return index.module.code_for_node(expr) if expr is not None else ""


# Callees whose body ddplint cannot see, named like a save: they write what they are given.
_SAVE_NAME = re.compile(r"save|ckpt|checkpoint|persist|dump|serial|write|store", re.IGNORECASE)
_NOT_SAVE_NAME = re.compile(r"load|restore|restart|read|resume|log|print|update|copy", re.IGNORECASE)


def _saves(index: SemanticIndex) -> Iterator[tuple[list[cst.BaseExpression], Optional[cst.BaseExpression]]]:
    """Every save of this module: (the objects it writes, the path when known):
    ``torch.save(obj, f)``, a project function that ``torch.save``s one of its
    parameters (``write_ckpt({"net": model.state_dict()}, d)``), and, when the
    callee's body is not visible, a call named like a save (``save_file``)."""
    project = project_of(index)
    for site in index.calls:
        qualified = site.qualified_name or ""
        if qualified == names.TORCH_SAVE:
            obj, target = site.argument("obj"), site.argument("f")
            if obj is not None:
                yield [obj.value], target.value if target is not None else None
            continue
        written = dotted_name(site.node.func)
        callee = project_callee(index, site.node) or written
        if callee is None or qualified.startswith("torch."):
            continue
        key = project.saving_function(index.path, callee, index.imports)
        if key is not None:
            saved, position = [], 0
            for arg in site.node.args:
                if arg.star:
                    break
                slot = arg.keyword.value if arg.keyword is not None else str(position)
                position += arg.keyword is None
                if project.call_saves(key, callee, slot):
                    saved.append(arg.value)
            if saved:
                yield saved, _path_argument(site)
            continue
        last = callee.split(".")[-1]
        if project.resolve_function(index.path, callee, index.imports) is None and not helper_functions(index, site) \
                and _SAVE_NAME.search(last) and not _NOT_SAVE_NAME.search(last):
            yield [arg.value for arg in site.node.args], _path_argument(site)


def _path_argument(site: CallSite) -> Optional[cst.BaseExpression]:
    """The argument of a save helper that looks like the file it writes."""
    for arg in site.node.args:
        if isinstance(arg.value, (cst.SimpleString, cst.FormattedString)):
            return arg.value
        if arg.keyword is not None and arg.keyword.value in ("path", "filename", "file", "f", "fname", "ckpt_path",
                                                             "checkpoint_path", "save_path", "filepath"):
            return arg.value
    return None


def _state_dict_calls(index: SemanticIndex, expr: cst.BaseExpression, key: str = "",
                      depth: int = 0) -> Iterator[tuple[CallSite, str]]:
    """``x.state_dict()`` calls that end up in the saved object, each with the
    key it is saved under ("" for the object itself): directly, as values of a
    dict display or ``dict(...)`` (nested), elements of a list, through a name
    bound to such a value, or stored into that name afterwards
    (``ckpt["model"] = ddp.state_dict()``). A comprehension that rewrites the
    keys (``{k[7:]: v for k, v in ddp.state_dict().items()}``) is not followed."""
    if depth > 4:
        return
    if isinstance(expr, cst.Call):
        site = index.call_site(expr)
        if site is not None and site.method == "state_dict":
            yield site, key
        elif isinstance(expr.func, cst.Name) and expr.func.value in ("dict", "OrderedDict") \
                and index.qualified_name(expr.func) in (None, "collections.OrderedDict"):
            for arg in expr.args:
                inner = key or (arg.keyword.value if arg.keyword is not None else "")
                yield from _state_dict_calls(index, arg.value, inner, depth + 1)
    elif isinstance(expr, cst.Dict):
        for element in expr.elements:
            if isinstance(element, cst.DictElement):
                inner = key or literal_str(element.key) or ""
                yield from _state_dict_calls(index, element.value, inner, depth + 1)
    elif isinstance(expr, (cst.List, cst.Tuple)):
        for element in expr.elements:
            yield from _state_dict_calls(index, element.value, key, depth + 1)
    elif isinstance(expr, cst.Name):
        for binding in index.reaching(expr.value, expr):
            if binding.kind in ("assign", "annassign") and binding.value is not None:
                yield from _state_dict_calls(index, binding.value, key, depth + 1)
        scope = index.enclosing_scope(expr)
        for target, value in index.subscript_assignments:
            if dotted_name(target.value) == expr.value and index.enclosing_scope(target) is scope \
                    and precedes(index, target, expr):
                slice_ = target.slice[0].slice if len(target.slice) == 1 else None
                inner = literal_str(slice_.value) if isinstance(slice_, cst.Index) else None
                yield from _state_dict_calls(index, value, key or inner or "", depth + 1)


# Words of a load path that name another checkpoint than the training one.
_OTHER_CHECKPOINT = ("pretrain", "backbone", "imagenet", "teacher", "http", "url", "hub")


def _loaders_strip(index: SemanticIndex, name: str, path_text: str, key: str) -> bool:
    """Do the loaders of THIS checkpoint strip the 'module.' prefix? A strip of
    the project (``{k[7:]: v ...}``, ``k.replace("module.", "")``,
    ``consume_prefix_in_state_dict_if_present``) counts when it rewrites a loaded
    checkpoint that may be this one: file names that can match, the same key of
    the saved dict, no sign that it loads pretrained weights; a strip of a dict
    whose origin is unknown (a parameter) counts only where this module's entry
    scripts reach. Strips of live models' names are not loaders."""
    project = project_of(index)
    scope = project.scope(index.path)
    # A pretraining script's checkpoint is what other scripts load as "pretrained" weights.
    lowered = (name + " " + path_text + " " + PurePosixPath(index.path).stem).lower()
    for path, module in project.modules.items():
        for strip in module.prefix_strips:
            if strip.source in ("param", "unknown"):
                if path in scope and not (strip.source == "param" and path == index.path
                                          and _param_strips_see_live_models(index)):
                    return True
                continue
            if strip.source != "load":
                continue
            if strip.keys and key not in strip.keys:
                continue  # another entry of the loaded dict
            hint = strip.path_text.lower()
            if any(word in hint and word not in lowered for word in _OTHER_CHECKPOINT) \
                    and not (strip.submodule and key and key in strip.keys):
                # pretrained / teacher weights; but ``checkpoint["state_dict"]`` stripped of
                # "module.encoder_q." is the DDP checkpoint saved under that key (MoCo's lincls)
                continue
            if _evaluation_sibling(index.path, path) and path in linked_modules(index):
                return True  # the evaluation script next to this one (its path is the user's to set)
            if name and strip.path:
                if fnmatch(name, strip.path) or fnmatch(strip.path, name):
                    return True  # a loader of this file, anywhere in the project
                continue
            # The file is chosen at run time: a loader in reach, or one of this entry of the dict.
            if path in scope or key:
                return True
    return False


_EVALUATION_SCRIPT = re.compile(r"(^|_)(test|eval|evaluate|evaluation|inference|infer|predict|demo)(_|$)", re.IGNORECASE)


def _evaluation_sibling(saver: str, loader: str) -> bool:
    """Is ``loader`` the evaluation script of the folder ``saver`` trains in
    (``train_x.py`` saves, ``test_x.py`` next to it loads the weights and strips
    the prefix)? Its file name is a placeholder the user replaces, so the names
    need not match."""
    saver_path, loader_path = PurePosixPath(saver), PurePosixPath(loader)
    return saver_path != loader_path and saver_path.parent == loader_path.parent \
        and bool(_EVALUATION_SCRIPT.search(loader_path.stem))


def _param_strips_see_live_models(index: SemanticIndex) -> bool:
    """Every function of this module that strips 'module.' from a parameter's
    keys is handed a live model's ``state_dict()`` by its callers here
    (``sanity_check(model.state_dict(), args.pretrained)`` comparing the trained
    weights with pretrained ones): those strips rename keys to compare, they load
    no checkpoint."""
    from ddplint.analysis.flow import callers, enclosing_function

    functions = {}
    for node, value in index.strings:
        if isinstance(value, str) and value.startswith("module"):
            function = enclosing_function(index, node)
            if function is None:
                return False  # a module-level strip: not this shape
            if _iterates_a_parameter(index, function):
                functions[id(function)] = function
    if not functions:
        return False
    for function in functions.values():
        calls = callers(index, function)
        if not calls or not all(any(isinstance(a.value, cst.Call) and isinstance(a.value.func, cst.Attribute)
                                        and a.value.func.attr.value == "state_dict" for a in site.node.args)
                                for site in calls):
            return False
    return True


def _iterates_a_parameter(index: SemanticIndex, function: cst.FunctionDef) -> bool:
    """Does the function walk the keys of one of its parameters (``for k in
    list(state_dict.keys())``, ``sd.items()``)?"""
    params = {p.name.value for p in function.params.params}
    return any(site.scope is function and isinstance(site.receiver, cst.Name) and site.receiver.value in params
               for site in index.method_calls("keys", "items"))
