"""Project facts of the checkpoint rules: save helpers (params a function hands
to torch.save, through other helpers, with or without a rank guard) and the
'module.' prefix strips with the checkpoint each one rewrites."""

import textwrap

from ddplint.screen.facts import PrefixStrip, summarize
from ddplint.screen.project import Project


def _facts(path, source):
    return summarize(textwrap.dedent(source), path)


def test_save_helpers_through_helpers_and_guards():
    utils = _facts("utils.py", """
        import torch
        import torch.distributed as dist
        def write(state, path):
            torch.save(state, path)
        def write_all(*args):
            torch.save(*args)
        def save_on_master(state, path):
            if dist.get_rank() == 0:
                torch.save(state, path)
        def checkpoint(blob, folder):
            write(blob, folder)
        def guarded(blob):
            if dist.get_rank() == 0:
                write(blob, "x.pt")
    """)
    project = Project([utils])
    assert project.saved_params("utils.py", "write") == {"state"}
    assert project.saved_params("utils.py", "write", unguarded=True) == {"state", "path"}  # what or where
    assert project.saved_params("utils.py", "write_all") == {"*"}
    assert project.saved_params("utils.py", "save_on_master") == {"state"}
    assert project.saved_params("utils.py", "save_on_master", unguarded=True) == set()
    assert project.saved_params("utils.py", "checkpoint", unguarded=True) == {"blob", "folder"}
    assert project.saved_params("utils.py", "guarded") == {"blob"}
    assert project.saved_params("utils.py", "guarded", unguarded=True) == set()
    key = project.saving_function("utils.py", "write_all")
    assert key is not None and project.call_saves(key, "write_all", "3")


def test_prefix_strips_know_the_checkpoint_they_rewrite():
    strips = _facts("load.py", """
        import torch
        def resume(net, path):
            ckpt = torch.load(path, map_location="cpu")
            sd = ckpt["model"] if "model" in ckpt else ckpt
            net.load_state_dict({k[7:]: v for k, v in sd.items()})
        def pretrained(net):
            sd = torch.load(cfg.pretrained, map_location="cpu")
            new = {}
            for k, v in sd.items():
                new[k.replace("module.", "")] = v
        def export():
            sd = torch.load(f"{out}/last_{tag}.pt")["state_dict"]
            return {k.removeprefix("module."): v for k, v in sd.items()}
        def names(model):
            return [n.replace("module.", "") for n, _ in model.named_parameters()]
        def given(sd):
            return {k[7:]: v for k, v in sd.items()}
    """).prefix_strips
    assert strips == [
        PrefixStrip("load", "", "path", ("model", "")),
        PrefixStrip("load", "", "cfg.pretrained", ("",)),
        PrefixStrip("load", "last_*.pt", "f'{out}/last_{tag}.pt'", ("state_dict",)),
        PrefixStrip("live"),
        PrefixStrip("param"),
    ]
