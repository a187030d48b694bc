"""`ddplint smoke`: the seven fixture scripts of fixtures/smoke/ run for real.

Each runs unmodified on 2 gloo ranks through torchrun (spawn.py: as one process that
mp.spawns its ranks), instrumented from outside, through the real CLI in a subprocess;
the JSON report is checked gate by gate and joined to the static finding the linter
reports on the same script.
"""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ddplint.runtime.smoke.events import classify_failure
from ddplint.runtime.smoke.join import lint_script
from ddplint.runtime.smoke.launch import spawns_its_own_ranks
from ddplint.runtime.smoke.recorder import union_seconds

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "smoke"
CHECKS = ["memory-growth", "allreduce-per-step", "comm-fraction", "data-steps", "hang", "exception"]
TIMEOUT = 30  # collective timeout given to the runs: a hang is diagnosed within it
STEPS = 6


def smoke(*args, cwd=ROOT, env=None):
    """Run `python -m ddplint smoke ARGS` for real; a hard bound keeps a broken run from hanging CI."""
    environment = {**os.environ, **(env or {})}
    environment.pop("NO_COLOR", None)
    return subprocess.run([sys.executable, "-m", "ddplint", "smoke", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=600)


def run_fixture(name, *extra, steps=STEPS):
    done = smoke("--format", "json", "--device", "cpu", "--steps", str(steps), "--timeout", str(TIMEOUT), "-q",
                 *extra, "--", f"fixtures/smoke/{name}.py")
    assert done.stdout.strip(), f"no report; stderr:\n{done.stderr}"
    return done.returncode, json.loads(done.stdout), done.stderr


def checks(doc):
    assert [c["name"] for c in doc["checks"]] == CHECKS
    return {c["name"]: c for c in doc["checks"]}


def joined(doc, code):
    return [f for f in doc["findings"] if f["code"] == code]


# ------------------------------------------------------------------ runtime, fixture by fixture

pytestmark = [pytest.mark.runtime]
slow = pytest.mark.slow
torch = pytest.importorskip("torch")


@slow
def test_clean_script_passes_every_gate():
    code, doc, _ = run_fixture("clean")
    assert code == 0 and doc["verdict"] == "pass"
    assert set(doc) == {"schema", "verdict", "ranks", "steps", "device", "backend", "checks", "findings",
                        "per_rank"}
    assert (doc["schema"], doc["ranks"], doc["steps"], doc["device"], doc["backend"]) == (1, 2, STEPS, "cpu", "gloo")
    found = checks(doc)
    assert {name: c["verdict"] for name, c in found.items()} == dict.fromkeys(CHECKS, "pass")
    for c in doc["checks"]:
        assert set(c) == {"name", "verdict", "value", "unit", "message", "rules", "locations"}
    assert found["allreduce-per-step"]["value"] == 1
    assert 0 <= found["comm-fraction"]["value"] <= 0.5
    assert doc["findings"] == []
    for rank in doc["per_rank"]:
        assert rank["outcome"] == "stopped" and rank["steps"] == STEPS
        assert rank["allreduce"]["rounds"] == [1] * STEPS
        assert rank["memory"]["kind"] == "saved-tensors" and len(rank["memory"]["bytes"]) == STEPS
        assert rank["loaders"] == {"clean.py:61": {"length": 16, "batches": STEPS}}
        assert rank["samples_per_s"] > 0 and rank["flops_per_step"] > 0 and rank["tflops"] > 0
        assert set(rank["breakdown_s"]) == {"data", "forward", "backward", "optimizer", "other", "communication"}


@slow
def test_eval_loss_append_fails_memory_growth_and_confirms_ddp001():
    code, doc, _ = run_fixture("eval_leak")
    found = checks(doc)
    assert code == 1 and doc["verdict"] == "fail"
    growth = found["memory-growth"]
    assert growth["verdict"] == "fail" and growth["value"] > 100_000  # a batch's activations per step
    assert "rose on every one of the last" in growth["message"]
    for rank in doc["per_rank"]:
        series = rank["memory"]["bytes"]
        assert all(b > a for a, b in zip(series[1:], series[2:]))
    (finding,) = joined(doc, "DDP001")
    assert (finding["status"], finding["check"], finding["line"]) == ("confirmed", "memory-growth", 75)
    assert any(loc["rule"] == "DDP001" and loc["status"] == "confirmed" for loc in growth["locations"])
    assert found["allreduce-per-step"]["verdict"] == "pass" and found["hang"]["verdict"] == "pass"


@slow
def test_accumulation_without_no_sync_fails_allreduce_per_step_and_confirms_ddp002():
    code, doc, _ = run_fixture("accumulate")
    found = checks(doc)
    assert code == 1
    check = found["allreduce-per-step"]
    assert check["verdict"] == "fail" and check["value"] == 4
    (finding,) = joined(doc, "DDP002")
    assert (finding["status"], finding["line"]) == ("confirmed", 68)
    (location,) = [loc for loc in check["locations"] if loc["rule"] == "DDP002"]
    assert location["message"] == ("DDP002 fixtures/smoke/accumulate.py:68: confirmed — "
                                   "4 all-reduce rounds per optimizer step in this run")
    assert found["memory-growth"]["verdict"] == "pass"
    assert all(rank["allreduce"]["rounds"] == [4] * STEPS for rank in doc["per_rank"])


@slow
def test_rank_divergent_continue_hangs_and_is_diagnosed_naming_rank_and_collective():
    code, doc, _ = run_fixture("divergent_skip", steps=10)
    found = checks(doc)
    assert code == 1
    hang = found["hang"]
    assert hang["verdict"] == "fail"
    # Rank 1 skipped one batch (NaN loss), so rank 0's 8th backward waits for a partner.
    assert re.search(r"rank 0 waited [\d.]+ s in collective #8 DDP gradient all_reduce "
                     r"\(divergent_skip\.py:70, step 8\)", hang["message"]), hang["message"]
    assert "rank 1 never arrived: it finished the script after 7 collectives" in hang["message"]
    assert hang["value"] <= TIMEOUT  # bounded: diagnosed within the collective timeout
    (finding,) = joined(doc, "DDP014")
    assert (finding["status"], finding["line"]) == ("confirmed", 68)
    assert found["exception"]["verdict"] == "pass"
    assert [r["outcome"] for r in doc["per_rank"]] == ["collective-failed", "finished"]


@slow
def test_one_rank_raising_stops_the_others_within_seconds():
    code, doc, _ = run_fixture("rank_raises")
    found = checks(doc)
    assert code == 1
    exc = found["exception"]
    assert exc["verdict"] == "fail"
    assert exc["message"].startswith("rank 1 raised IndexError: Target 12 is out of bounds. at rank_raises.py:69")
    assert exc["value"] < TIMEOUT  # the peer did not sit out the collective timeout
    assert exc["locations"][0]["path"] == "fixtures/smoke/rank_raises.py" and exc["locations"][0]["line"] == 69
    rank1 = doc["per_rank"][1]
    assert rank1["outcome"] == "raised" and "Target 12 is out of bounds" in rank1["exception"]["traceback"]
    assert found["hang"]["verdict"] == "pass"  # rank 0 was left waiting by the exception, not a hang


@slow
def test_uneven_loader_fails_data_steps():
    code, doc, _ = run_fixture("uneven_shards")
    found = checks(doc)
    assert code == 1
    data = found["data-steps"]
    assert data["verdict"] == "fail" and data["value"] == 1
    assert "(rank 0: 13, rank 1: 12)" in data["message"]
    assert data["locations"][0]["line"] == 60
    assert found["hang"]["verdict"] == "pass"  # --steps ends the run before the uneven epoch end


@slow
def test_script_that_spawns_its_own_ranks_is_instrumented():
    code, doc, stderr = run_fixture("spawn")
    assert code == 0, stderr
    found = checks(doc)
    assert {name: c["verdict"] for name, c in found.items()} == dict.fromkeys(CHECKS, "pass")
    assert doc["ranks"] == 2 and doc["steps"] == STEPS
    assert [r["rank"] for r in doc["per_rank"]] == [0, 1]
    assert all(r["outcome"] == "stopped" and r["allreduce"]["rounds"] == [1] * STEPS for r in doc["per_rank"])


@slow
def test_module_run_of_a_nccl_script_on_cpu_wraps_the_users_own_comm_hook(tmp_path):
    """`-m pkg.train`: --device cpu runs a script written for NCCL on gloo (and says so), and
    a comm hook the script registers after the wrap still runs, under the counting hook."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(textwrap.dedent("""\
        import os
        import torch
        import torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel as DDP

        def counted_hook(state, bucket):
            state["calls"] += 1
            return default_hooks.allreduce_hook(None, bucket)

        dist.init_process_group("nccl")
        try:
            model = DDP(torch.nn.Linear(8, 2))
            state = {"calls": 0}
            model.register_comm_hook(state, counted_hook)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(100):
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
                opt.zero_grad()
                with open(os.environ["HOOK_LOG"] + os.environ["RANK"], "w") as f:
                    f.write(str(state["calls"]))
        finally:
            dist.destroy_process_group()
        """))
    # An 8x2 layer is all communication: the comm-fraction gate is not what this test is about.
    done = smoke("--format", "json", "--device", "cpu", "--steps", "4", "--timeout", str(TIMEOUT), "-q",
                 "--max-comm-fraction", "1", "-m", "pkg.train", cwd=tmp_path,
                 env={"HOOK_LOG": str(tmp_path / "hook-calls-")})
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["backend"] == "gloo"
    assert all(r["backend_requested"] == "nccl" and r["backend"] == "gloo" for r in doc["per_rank"])
    assert all(r["allreduce"]["rounds"] == [1] * 4 for r in doc["per_rank"])
    # The user's hook ran once per step on each rank (the log is written after each step: 3 of 4).
    assert [(tmp_path / f"hook-calls-{rank}").read_text() for rank in (0, 1)] == ["3", "3"]


@slow
def test_readme_ci_example_runs_as_written_on_the_clean_fixture():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (command,) = re.findall(r"^\s*- run: (ddplint smoke .*)$", readme, re.M)
    assert "--steps 6" in command and "fixtures/smoke/clean.py" in command
    args = command.split()[2:]
    done = smoke(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verdict: PASS" in done.stdout
    for name in CHECKS:
        assert re.search(rf"^{name}\s+pass\b", done.stdout, re.M), done.stdout


# ------------------------------------------------------------------ the run cannot be made: exit 2


def test_missing_script_exits_2():
    done = smoke("--", "no_such_train.py")
    assert done.returncode == 2 and "script not found: no_such_train.py" in done.stderr
    assert done.stdout == ""


def test_without_torch_it_says_how_to_install_the_runtime_extra(monkeypatch):
    import importlib.util

    from click.testing import CliRunner

    from ddplint.cli import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    result = CliRunner().invoke(cli, ["smoke", "--", str(FIXTURES / "clean.py")])
    assert result.exit_code == 2
    assert "pip install 'ddplint[runtime]'" in result.output


# ------------------------------------------------------------------ the pieces, without launching


def test_the_linter_reports_each_joined_rule_and_the_clean_scripts_lint_clean():
    codes = {name: [(f.code, f.line) for f in lint_script(FIXTURES / f"{name}.py")]
             for name in ("clean", "eval_leak", "accumulate", "divergent_skip", "rank_raises", "uneven_shards",
                          "spawn")}
    assert codes == {"clean": [], "eval_leak": [("DDP001", 75)], "accumulate": [("DDP002", 68)],
                     "divergent_skip": [("DDP014", 68)], "rank_raises": [], "uneven_shards": [], "spawn": []}


def test_launcher_choice_sees_mp_spawn():
    assert spawns_its_own_ranks((FIXTURES / "spawn.py").read_text())
    assert not spawns_its_own_ranks((FIXTURES / "clean.py").read_text())
    assert spawns_its_own_ranks("from torch.multiprocessing import spawn as go\ngo(f, nprocs=2)\n")
    assert spawns_its_own_ranks("import torch\ntorch.multiprocessing.start_processes(f, nprocs=2)\n")
    assert not spawns_its_own_ranks("import multiprocessing as mp\nmp.get_context('spawn')\n")


def test_overlapping_all_reduces_count_once_in_communication_time():
    assert union_seconds([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)], 0.0, 10.0) == 4.0
    assert union_seconds([(-1.0, 1.0), (9.0, 12.0)], 0.0, 10.0) == 2.0  # clipped to the step


def test_backend_failures_are_told_from_the_users_own_errors():
    assert classify_failure(RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
                                         "Connection closed by peer [127.0.0.1]:5000")) == "peer-lost"
    assert classify_failure(RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
                                         "10000ms for recv operation to complete")) == "timeout"
    assert classify_failure(IndexError("Target 12 is out of bounds.")) is None
    assert classify_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x8 and 9x2)")) is None


def test_a_rank_killed_in_a_collective_is_diagnosed_from_its_log():
    """NCCL's watchdog aborts a hung rank: no Python error, only its event log. The hang is
    read from the collectives it logged that its peer never issued."""
    from ddplint.runtime.smoke.gates import RunFacts, evaluate
    from ddplint.runtime.smoke.telemetry import RankRun, _apply

    def rank_run(rank, collectives, last):
        run = RankRun(rank=rank, pid=100 + rank)
        _apply(run, {"ev": "init", "t": 0.0, "rank": rank, "world_size": 2, "memory_kind": "cuda-allocated"})
        for seq in range(1, collectives + 1):
            _apply(run, {"ev": "coll", "t": float(seq), "seq": seq, "group": "world", "op": "DDP gradient all_reduce",
                         "bytes": 4096, "site": ["/job/train.py", 70], "step": seq, "bucket": 0})
        _apply(run, last)
        return run

    hung = rank_run(0, 8, {"ev": "step", "t": 7.5, "n": 7, "wall_s": 0.1, "comm_s": 0.01, "rounds": 1,
                           "buckets": 1, "bucket_bytes": 4096, "collectives": {}, "batches": {}, "samples": 8,
                           "mem": 1, "rss": 1})
    hung.ended_t = 68.0  # aborted 60 s after it entered collective #8
    finished = rank_run(1, 7, {"ev": "exit", "t": 7.6, "steps": 7, "issued": 7})
    checks = {c.name: c for c in evaluate([hung, finished], RunFacts(0.5, 60.0))}
    assert checks["hang"].verdict == "fail" and checks["hang"].value == 60.0
    assert checks["hang"].message.startswith("rank 0 waited 60.0 s in collective #8 DDP gradient all_reduce "
                                             "(train.py:70, step 8) and was killed while waiting; rank 1 never "
                                             "arrived: it finished the script after 7 collectives")
    assert checks["exception"].verdict == "pass"  # the abort is the hang's, not a crash of its own
