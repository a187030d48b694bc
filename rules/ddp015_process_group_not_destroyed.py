"""## What it does
Flags `init_process_group(...)` in a module when nothing its entry script reaches
calls `destroy_process_group()` (directly, in a `finally:`, through a cleanup
helper of another module, or registered with `atexit`/a signal handler). A
one-file project is complete; independent scripts of one folder (an examples
repository) never satisfy each other, and a comment that names the call is not
the call. A destroy inside a function that nothing runs (a `cleanup()` helper no
code calls, names or registers) is no destroy, while the set-up is known to run;
when neither is known to run (a library's `setup()`/`teardown()` pair), the
pair counts. Each `init_process_group` is reported, except one whose own function
destroys the group it made (a local launcher `run_local(): init; main(); destroy`).
A script whose `__main__` block starts the run is judged by its own run: a
module that imports it and destroys the group afterwards (a sweep driver, a test
script) does not clean up `python train.py`. A call of a `teardown()` of this
module or the project that never destroys the group (`dist.rpc.shutdown()` is
not `destroy_process_group()`) is no cleanup; one we cannot see into is.

## Why is this bad?
Without `destroy_process_group()` the communicators are torn down by interpreter
exit in arbitrary order. When one rank raises, its peers stay blocked in the
next collective until the NCCL timeout (30 minutes by default) instead of
failing fast, and recent PyTorch versions warn about leaked process groups.

## Example
    def main():
        dist.init_process_group("nccl")
        train()

## Use instead
    def main():
        dist.init_process_group("nccl")
        try:
            train()
        finally:
            dist.destroy_process_group()

## References
- https://pytorch.org/docs/stable/distributed.html#shutdown
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from ddplint import names
from ddplint.analysis.models import project_of
from ddplint.analysis.roles import entry_script_starts_processes
from ddplint.rule import Invalid, Report, Rule, Valid
from ddplint.analysis.semantic import SemanticIndex, dotted_name

DIST = "import torch.distributed as dist\n"
# A call of a helper named like this may destroy the group in a module we cannot see.
_CLEANUP = re.compile(r"cleanup|clean_up|destroy|teardown|tear_down|shutdown|finali[sz]e|cleanup_dist",
                      re.IGNORECASE)


class ProcessGroupNotDestroyed(Rule):
    code, name, severity = "DDP015", "process-group-not-destroyed", "info"
    message = "init_process_group without destroy_process_group anywhere in the project"
    RUN_MESSAGE = ("init_process_group without destroy_process_group on this script's own run "
                   "(only a module that imports it destroys the group)")
    triggers = ("init_process_group",)
    needs_ddp_context = True
    uses_project = True

    valid = [
        Valid(DIST + "dist.init_process_group('nccl')\ntrain()\ndist.destroy_process_group()\n"),
        Valid(DIST + "def main():\n    dist.init_process_group('nccl')\n    try:\n        train()\n"
                     "    finally:\n        dist.destroy_process_group()\n"),
        Valid(DIST + "import atexit\ndist.init_process_group('nccl')\natexit.register(dist.destroy_process_group)\n"),
        Valid(DIST + "from utils import cleanup\ndist.init_process_group('nccl')\ntrain()\ncleanup()\n"),
        Valid(DIST + "def setup():\n    dist.init_process_group('gloo')\ndef teardown():\n"
                     "    dist.destroy_process_group()\n"),
        Valid("from torch.distributed import init_process_group, destroy_process_group\n"
              "init_process_group(backend='nccl')\ntrain()\ndestroy_process_group()\n"),
        Valid("import deepspeed\ndeepspeed.init_distributed()\ninit_process_group = 1\n"),
        Valid(DIST + "import dist_utils\ndist.init_process_group('nccl')\ntrain()\ndist_utils.shutdown()\n"),
        Valid(DIST + "import signal\ndist.init_process_group('nccl')\n"
                     "signal.signal(signal.SIGTERM, lambda *a: dist.destroy_process_group())\n"),
        Valid(DIST + "import functools, atexit\ndist.init_process_group('nccl')\n"
                     "atexit.register(functools.partial(dist.destroy_process_group, None))\n"),
    ]
    invalid = [
        # The worker's init is never destroyed; a local launcher nothing runs pairs its own init with a
        # destroy: only the worker's init is reported.
        Invalid(DIST + "def main():\n    if not dist.is_initialized():\n        dist.init_process_group('nccl')\n"
                       "    train()\ndef run_local(rank, world):\n"
                       "    dist.init_process_group('gloo', rank=rank, world_size=world)\n"
                       "    main()\n    dist.destroy_process_group()\nif __name__ == '__main__':\n    main()\n",
                line=4, column=9),
        # A teardown of this module that shuts RPC down but never destroys the group (a94 ptd_benchmark).
        Invalid(DIST + "import os\ndef setup(args):\n    dist.init_process_group('nccl')\n"
                       "def teardown(args):\n    if args.mode == 'pdp':\n        dist.rpc.shutdown()\n"
                       "    if int(os.getenv('RANK')) == 0:\n        print('Finished')\n"
                       "def main(args):\n    setup(args)\n    train(args)\n    teardown(args)\n"
                       "if __name__ == '__main__':\n    main(parse())\n", line=4, column=5),
        # The only destroy sits in a helper nothing calls, while the set-up runs.
        Invalid(DIST + "class Fitter:\n    def __init__(self, cfg):\n        if cfg.ddp:\n            self.start_group(cfg)\n"
                       "    def start_group(self, cfg):\n        dist.init_process_group('nccl', rank=cfg.rank)\n"
                       "    @staticmethod\n    def release():\n        dist.destroy_process_group()\n",
                line=7, column=9),
        Invalid(DIST + "dist.init_process_group('nccl')\ntrain()\n", line=2, column=1),
        Invalid(DIST + "def main():\n    dist.init_process_group(backend='nccl', init_method='env://')\n"
                       "    train()\nmain()\n", line=3, column=5),
        Invalid("from torch.distributed import init_process_group\ninit_process_group('nccl')\n",
                line=2, column=1),
        Invalid("import torch\ntorch.distributed.init_process_group(backend='gloo')\n", line=2, column=1),
        Invalid(DIST + "def setup(rank, world_size):\n    os.environ['MASTER_PORT'] = '12355'\n"
                       "    dist.init_process_group('nccl', rank=rank, world_size=world_size)\n",
                line=4, column=5),
        Invalid(DIST + "import torch.multiprocessing as mp\ndef worker(rank):\n"
                       "    dist.init_process_group('gloo', rank=rank, world_size=2)\n    run(rank)\n"
                       "mp.spawn(worker, nprocs=2)\n", line=4, column=5),
        Invalid(DIST + "if args.distributed:\n    dist.init_process_group(backend=args.backend)\n",
                line=3, column=5),
        Invalid(DIST + "class Runner:\n    def __init__(self):\n        dist.init_process_group('nccl')\n"
                       "    def close(self):\n        pass\n", line=4, column=9),
        # A comment that names the cleanup is not the cleanup.
        Invalid(DIST + "dist.init_process_group('nccl')\ntrain()\n# TODO: dist.destroy_process_group()\n",
                line=2, column=1),
    ]

    def screen(self, sketch):
        """The screen (necessary for check() to report): True, False, or the project facts that must hold."""
        return sketch.may_call(names.INIT_PROCESS_GROUP)

    def check(self, index: SemanticIndex) -> Iterator[Report]:
        project = project_of(index)
        if _refers_to_destroy(index):
            return
        message = self.message
        if entry_script_starts_processes(index):
            # An entry script's own run: a test module that imports it and destroys the
            # group afterwards (ptd_benchmark's tests.py) does not clean up this run.
            if any(project.destroys_process_group(m) for m in project.run_scope(index.path)):
                return
            if project.in_scope(index.path, lambda m: project.destroys_process_group(m.path)):
                message = self.RUN_MESSAGE
        elif project.in_scope(index.path, lambda m: project.destroys_process_group(m.path)):
            return
        if not _init_may_run(index, project) and project.in_scope(index.path, lambda m: bool(m.destroy_functions)):
            return  # ``def setup(): init`` / ``def teardown(): destroy``: neither is known to run
        if _may_clean_up_elsewhere(index):
            return  # a cleanup helper, perhaps from a module we were not given
        if not project.complete and _calls_local_modules(index):
            return  # linted alone: the project's other modules may destroy it
        destroyed_in = {id(index.enclosing_scope(site.node)) for site in index.method_calls("destroy_process_group")}
        for site in index.calls_to(names.INIT_PROCESS_GROUP):
            if id(index.enclosing_scope(site.node)) in destroyed_in:
                continue  # ``def run_local(): init ... destroy`` (a launcher nothing runs): this one is paired
            yield self.report(site.node, message)


# Packages that are never the user's own project modules.
_LIBRARIES = frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "numpy", "os", "sys", "argparse", "time", "math",
    "random", "json", "logging", "collections", "functools", "itertools", "pathlib", "typing", "copy",
    "re", "shutil", "subprocess", "datetime", "warnings", "tqdm", "transformers", "PIL", "yaml", "wandb",
    "tensorboard", "tensorboardX", "matplotlib", "pandas", "scipy", "sklearn", "timm", "einops",
    "contextlib", "socket", "glob", "pickle", "io", "dataclasses", "datasets", "hydra", "omegaconf",
    "deepspeed", "apex", "platform", "signal", "tempfile", "uuid", "hashlib", "inspect", "fire", "click",
})


def _calls_local_modules(index: SemanticIndex) -> bool:
    """Does the module call something imported from outside the standard
    library and well-known packages, or through a relative import?"""
    for site in index.calls:
        head = (dotted_name(site.node.func) or "").split(".")[0]
        target = index.imports.get(head)
        if target is not None and (target.startswith(".") or target.split(".")[0] not in _LIBRARIES):
            return True
    return False


def _refers_to_destroy(index: SemanticIndex) -> bool:
    """``destroy_process_group`` called, imported, or handed on as a function
    (``atexit.register(dist.destroy_process_group)``); a comment or docstring
    that names it does not count."""
    calls = index.method_calls("destroy_process_group")
    project = project_of(index)
    if calls and (project.destroys_process_group(index.path) or not _init_may_run(index, project)) or any(
            target.endswith("destroy_process_group") for target in index.imports.values()):
        return True  # (a destroy in a function nothing runs, ``def cleanup(): ...``, is no cleanup)
    return any((dotted_name(arg.value) or "").endswith("destroy_process_group")
               for site in index.calls for arg in site.node.args)


def _init_may_run(index: SemanticIndex, project) -> bool:
    """Is some ``init_process_group`` of the module known to run: at module
    level, or in a function that ``Project.may_run``?"""
    from ddplint.analysis.models import function_key
    from ddplint.analysis.ranks import enclosing_function

    for site in index.calls_to(names.INIT_PROCESS_GROUP):
        function = enclosing_function(index, site.node)
        if function is None or project.may_run(index.path, function_key(index, function)):
            return True
    return False


def _may_clean_up_elsewhere(index: SemanticIndex) -> bool:
    """A call of a cleanup helper we cannot see into: not torch's own (``dist.rpc.shutdown()``),
    not a function of this module (no destroy in it: it would have been found), not a
    project function (the project's destroys were looked for already)."""
    # (destroy_process_group itself is judged by _refers_to_destroy: in a function nothing runs, it is none)
    project = project_of(index)
    for site in index.calls:
        method = site.method
        if not method or method == "destroy_process_group" or not _CLEANUP.search(method):
            continue
        callee = dotted_name(site.node.func)
        if (site.qualified_name or "").startswith("torch.") or (
                isinstance(site.node.func, cst.Name) and index.functions_named(method)) or (
                callee is not None and project.resolve_function(index.path, callee, index.imports) is not None):
            continue
        return True
    return False
