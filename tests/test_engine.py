"""Engine guarantees: internal errors, import hygiene, index facts."""

import subprocess
import sys
import textwrap

import libcst as cst

from ddplint.config import Settings
from ddplint.engine import Linter
from ddplint.analysis.semantic import SemanticIndex
from tests.helpers import BAD_SCRIPT, write


def test_a_crashing_rule_becomes_an_internal_error_and_the_run_goes_on(tmp_path, monkeypatch):
    from ddplint.rules.ddp005_find_unused_parameters import FindUnusedParameters

    def explode(self, index):
        raise ValueError("boom")

    monkeypatch.setattr(FindUnusedParameters, "check", explode)
    result = Linter(Settings(root=tmp_path)).lint_source(BAD_SCRIPT, "bad.py")
    codes = [d.code for d in result.diagnostics]
    assert "internal-error" in codes and "DDP007" in codes
    assert result.internal_errors == 1
    message = next(d.message for d in result.diagnostics if d.code == "internal-error")
    assert "DDP005" in message and "ValueError: boom" in message


def test_internal_error_exits_2_from_the_cli(tmp_path):
    write(tmp_path / "bad.py", BAD_SCRIPT)
    # Patch the rule inside a real CLI process.
    code = textwrap.dedent("""
        import sys
        from ddplint.rules import ddp005_find_unused_parameters as rule
        def explode(self, index):
            raise RuntimeError("broken rule")
        rule.FindUnusedParameters.check = explode
        from ddplint.cli import main
        sys.argv = ["ddplint", "-j", "1", "bad.py"]
        main()
    """)
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert "internal-error rule DDP005 (find-unused-parameters) failed on this file" in result.stdout
    assert "DDP007" in result.stdout


def test_one_file_lint_imports_neither_torch_nor_pygls_nor_rich(tmp_path):
    write(tmp_path / "bad.py", BAD_SCRIPT)
    probe = textwrap.dedent("""
        import sys
        from ddplint.cli import main
        sys.argv = ["ddplint", "bad.py"]
        try:
            main()
        except SystemExit as exit:
            code = exit.code
        heavy = sorted(m for m in ("torch", "pygls", "lsprotocol", "rich") if m in sys.modules)
        print("HEAVY:", heavy, "EXIT:", code, file=sys.stderr)
    """)
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    assert "HEAVY: [] EXIT: 1" in result.stderr, result.stderr


def test_qualified_names_are_alias_aware_and_canonical():
    source = textwrap.dedent("""
        import torch
        import torch.distributed as dist
        import torch.nn.parallel.distributed as ddp_mod
        from torch.utils.data.dataloader import DataLoader as DL
        from torch.nn.parallel import DistributedDataParallel as DDP
        def main():
            from torch.cuda.amp import GradScaler
            dist.init_process_group("nccl")
            DDP(m); ddp_mod.DistributedDataParallel(m); DL(ds)
            torch.nn.parallel.DistributedDataParallel(m)
            GradScaler()
            DataLoader(ds)
    """)
    index = SemanticIndex.build(cst.parse_module(source), source)
    names = [site.qualified_name for site in index.calls]
    assert names.count("torch.nn.parallel.DistributedDataParallel") == 3
    assert "torch.distributed.init_process_group" in names
    assert "torch.utils.data.DataLoader" in names
    assert "torch.amp.GradScaler" in names
    assert names.count("torch.utils.data.DataLoader") == 1  # the unimported DataLoader is not torch's
    assert index.in_ddp_context


def test_positional_and_keyword_argument_lookup():
    source = "from torch.utils.data import DataLoader\nDataLoader(ds, 10, False, None, None, 4)\n" \
             "DataLoader(ds, *rest)\nDataLoader(ds, **kw)\n"
    index = SemanticIndex.build(cst.parse_module(source), source)
    plain, starred, kwargs = index.calls_to("torch.utils.data.DataLoader")
    assert plain.argument("num_workers").value.value == "4"
    assert plain.argument("pin_memory") is None and not plain.may_pass("pin_memory")
    assert starred.argument("num_workers") is None and starred.may_pass("pin_memory")
    assert kwargs.may_pass("pin_memory") and kwargs.may_pass("anything")


def test_ddp_context():
    def context(source):
        return SemanticIndex.build(cst.parse_module(source), source).in_ddp_context

    assert context("import torch.distributed as dist\n")
    assert context("from torch.nn.parallel import DistributedDataParallel\n")
    assert context("import torch\ntorch.distributed.init_process_group('gloo')\n")
    assert context("import torch\nm = torch.nn.parallel.DistributedDataParallel(m)\n")
    assert not context("import torch\nmodel = model.cuda()\n")
    assert not context("from torch.utils.data import DataLoader\n")


def test_the_context_prefilter_never_skips_a_module_in_ddp_context():
    """The engine skips (ctx) rules on files without DDP_CONTEXT_PATTERN before
    parsing; every rule example that is in DDP context must match it."""
    from ddplint.registry import all_rules
    from ddplint.analysis.semantic import may_be_in_ddp_context

    checked = 0
    for rule in all_rules():
        for example in [*rule.valid, *rule.invalid]:
            try:
                module = cst.parse_module(example.source)
            except cst.ParserSyntaxError:
                continue
            if SemanticIndex.build(module, example.source).in_ddp_context:
                checked += 1
                assert may_be_in_ddp_context(example.source), example.source
    assert checked > 200
    assert not may_be_in_ddp_context("# distributed under the License is distributed on an AS IS BASIS\n")
    assert may_be_in_ddp_context("from torch import (\n    nn,\n    distributed as dist,\n)\n")
