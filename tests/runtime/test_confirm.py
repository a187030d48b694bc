"""`ddplint confirm --all --device cpu`: every CPU probe runs on real gloo ranks and confirms."""

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.runtime

from ddplint.runtime.confirm import run_confirm  # noqa: E402

CPU_PROBES = {"DDP001", "DDP002", "DDP003", "DDP004", "DDP005", "DDP008", "DDP009", "DDP010", "DDP011",
              "DDP013", "DDP014", "DDP015", "DDP020", "DDP021", "DDP023", "DDP024", "DDP025"}
NEEDS_GPU = {"DDP006", "DDP007", "DDP012", "DDP016", "DDP017", "DDP018", "DDP019", "DDP022"}


@pytest.fixture(scope="module")
def report():
    out = io.StringIO()
    t0 = time.monotonic()
    code = run_confirm(None, device="cpu", world_size=2, fmt="json", stream=out)
    doc = json.loads(out.getvalue())
    doc["_measured_wall"] = time.monotonic() - t0
    return code, doc


def by_rule(doc):
    return {r["rule"]: r for r in doc["results"]}


def measurement(result, metric_start):
    return next(m for m in result["measurements"] if m["metric"].startswith(metric_start))


def test_all_probes_run_and_cpu_ones_confirm(report):
    code, doc = report
    results = by_rule(doc)
    assert set(results) == CPU_PROBES | NEEDS_GPU
    not_confirmed = {r: (v["verdict"], v["reason"]) for r, v in results.items()
                     if r in CPU_PROBES and v["verdict"] != "confirmed"}
    assert not not_confirmed
    for rule in NEEDS_GPU:
        assert results[rule]["verdict"] == "not applicable here"
        assert "CUDA" in results[rule]["reason"]
    assert code == 0 and doc["exit_code"] == 0
    assert doc["_measured_wall"] < 180


def test_json_document_is_stable_and_records_the_environment(report):
    _, doc = report
    assert doc["schema"] == 1 and doc["device"] == "cpu" and doc["backend"] == "gloo"
    assert doc["world_size"] == 2 and doc["torch"] == torch.__version__
    for r in doc["results"]:
        for key in ("rule", "name", "metric", "unit", "pattern", "fixed", "ratio", "verdict", "reason",
                    "torch", "device", "world_size", "measurements"):
            assert key in r, (r["rule"], key)
        assert r["world_size"] == 2 and r["device"] == "cpu"
    assert doc["summary"] == {"confirmed": 17, "not confirmed": 0, "not applicable here": 8, "error": 0}


def test_figures_are_in_sane_bands(report):
    r = by_rule(report[1])
    assert (r["DDP002"]["pattern"], r["DDP002"]["fixed"]) == (4, 1)  # k=4 rounds vs 1
    assert (r["DDP013"]["pattern"], r["DDP013"]["fixed"]) == (4, 4)
    ddp002_time = measurement(r["DDP002"], "time per accumulation cycle")
    assert ddp002_time["repeats"] == 5 and ddp002_time["pattern_spread"][0] <= ddp002_time["pattern"]
    assert 1e-6 < r["DDP003"]["ratio"] < 1e-4  # ~1/65536
    assert r["DDP004"]["pattern"] > 0 and r["DDP004"]["fixed"] == 0
    assert 30000 < measurement(r["DDP004"], "parameter update norm")["ratio"] < 130000
    assert r["DDP001"]["pattern"] > 0 and r["DDP001"]["fixed"] == 0
    assert len(r["DDP001"]["measurements"][0]["pattern_series"]) == 8
    assert r["DDP005"]["repeats"] >= 7 and "fastest block" in r["DDP005"]["detail"]  # verdict checked above
    assert (r["DDP008"]["pattern"], r["DDP009"]["pattern"], r["DDP009"]["fixed"]) == (1.0, 1.0, 0.0)
    assert 1.8 < r["DDP010"]["pattern"] < 10 and r["DDP010"]["fixed"] < 1.0
    assert "rank(s) [1] never arrived at collective #3" in r["DDP010"]["detail"]
    assert "Ranks 1 failed to pass monitoredBarrier" in r["DDP010"]["detail"]
    assert (r["DDP011"]["pattern"], r["DDP011"]["fixed"]) == (2, 1)
    assert r["DDP014"]["pattern"] >= 1 and r["DDP014"]["fixed"] == 0
    assert "rank(s) [1] never arrived" in r["DDP014"]["detail"]
    assert r["DDP015"]["pattern"] > 1.8 and r["DDP015"]["fixed"] < 1.0
    assert r["DDP020"]["pattern"] > 1e-3 and r["DDP020"]["fixed"] == 0
    assert r["DDP021"]["pattern"] == 0 and r["DDP021"]["fixed"] > 0
    assert r["DDP023"]["pattern"] > 1.01 and r["DDP023"]["fixed"] == pytest.approx(1.0)
    assert r["DDP024"]["pattern"] < r["DDP024"]["fixed"]
    assert r["DDP025"]["pattern"] == 8 and r["DDP025"]["fixed"] == 0


def test_unknown_rule_is_an_error(capsys):
    assert run_confirm(["DDP999"], device="cpu") == 2
    assert "unknown rule id(s): DDP999" in capsys.readouterr().err


def test_cuda_asked_without_cuda_is_an_error(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert run_confirm(["DDP002"], device="cuda") == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_text_report_has_table_and_sparkline():
    out = io.StringIO()
    assert run_confirm(["DDP001", "DDP006"], device="cpu", fmt="text", stream=out) == 0
    text = out.getvalue()
    assert "DDP001" in text and "confirmed" in text and "not applicable here" in text
    assert "needs CUDA" in text
    assert "pattern ▁" in text and "█" in text  # the memory curve over steps
    assert "torch " + torch.__version__ in text


def test_torchrun_joins_the_process_group(tmp_path):
    """Under torchrun the probes join torchrun's group; rank 0 prints the report."""
    script = ("import sys; from ddplint.runtime.confirm import run_confirm; "
              "sys.exit(run_confirm(['DDP002', 'DDP009'], device='cpu', fmt='json'))")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:0",  # port 0: a free one
           "--no-python", sys.executable, "-c", script]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=str(tmp_path), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    start = proc.stdout.index("{")
    doc = json.loads(proc.stdout[start:])
    assert doc["launcher"] == "torchrun" and doc["world_size"] == 2
    assert [r["verdict"] for r in doc["results"]] == ["confirmed", "confirmed"]
    assert by_rule(doc)["DDP002"]["pattern"] == 4
    assert proc.stdout.count('"schema"') == 1  # only rank 0 printed
