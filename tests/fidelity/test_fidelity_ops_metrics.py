"""Op tracking, host (CPU) fallback ops, the metrics snapshot, logging, `info`."""
import csv
import json
import logging
from pathlib import Path

import pytest
import torch

import torch_neuronx
from torch_neuronx.cli import info as info_cli
from torch_neuronx.accounting import host_ops
from torch_neuronx.runtime import log as run_log
from torch_neuronx.accounting.signatures import enabled_from_env, make_accounting, salt_of
from torch_neuronx.projection import compile_model
from torch_neuronx.runtime.errors import ConfigError


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def fallback_log():
    logger = logging.getLogger("torch_neuronx")
    handler = _Records()
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)


def _spd(n):
    a = torch.randn(n, n, dtype=torch.float32)
    return a @ a.T + n * torch.eye(n)


LINALG = {
    "qr": lambda a: torch.linalg.qr(a).R.abs(),
    "svd": lambda a: torch.linalg.svdvals(a),
    "eigh": lambda a: torch.linalg.eigvalsh(a),
    "cholesky": lambda a: torch.linalg.cholesky(a),
    "slogdet": lambda a: torch.linalg.slogdet(a).logabsdet,
    "det": lambda a: torch.linalg.det(a),
    "triangular_solve": lambda a: torch.triangular_solve(torch.ones(a.shape[0], 1, device=a.device), a).solution,
}


@pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated")
def test_linalg_runs_on_host_reported_once_per_op(fallback_log):
    torch_neuronx.reset_metrics()
    a = _spd(6)
    for _ in range(2):
        for name, fn in LINALG.items():
            torch.testing.assert_close(fn(a.to("neuron")).cpu(), fn(a), rtol=1e-4, atol=1e-4, msg=name)
    fallbacks = torch_neuronx.get_fallback_ops()
    k = torch_neuronx.metrics()["kernels"]
    # Host ops run on the CPU on Trainium: counted apart, never compiled.
    assert k["host_fallback_calls"] == sum(k["per_op"][op]["calls"] for op in fallbacks) >= 2 * len(LINALG)
    assert all(k["per_op"][op]["misses"] == 0 for op in fallbacks)
    assert k["calls"] == k["hits"] + k["misses"] + k["host_fallback_calls"]
    assert {host_ops.normalize(op) for op in fallbacks} == set(LINALG)
    assert set(fallbacks) <= set(torch_neuronx.get_executed_ops())
    assert "aten::abs.out" in torch_neuronx.get_executed_ops() and "aten::abs.out" not in fallbacks
    warned = [m for m in fallback_log if "fell back to CPU" in m]
    assert len(warned) <= len(fallbacks)  # earlier tests in this process may have warned already
    first = len(fallback_log)
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_fallback_ops() == [] and torch_neuronx.get_executed_ops() == []
    LINALG["det"](_spd(7).to("neuron"))
    assert "det" in {host_ops.normalize(op) for op in torch_neuronx.get_fallback_ops()}
    assert len(fallback_log) == first  # once per op and process
    assert torch_neuronx.metrics()["fallback_ops"] == torch_neuronx.get_fallback_ops()


def test_fallback_warning_once_per_op_names_the_op(fallback_log):
    tracker = host_ops.OpTracker(("det", "qr"))
    for op in ("aten::_linalg_det", "aten::_linalg_det", "aten::linalg_qr", "aten::mm", "aten::_linalg_det"):
        tracker.note(op)
    warned = [m for m in fallback_log if "fell back to CPU" in m]
    assert len(warned) == 2
    assert warned[0].startswith("Operator 'aten::_linalg_det' fell back to CPU")
    assert tracker.fallbacks == {"aten::_linalg_det", "aten::linalg_qr"}
    tracker.clear()
    tracker.note("aten::linalg_qr")
    assert tracker.fallbacks == {"aten::linalg_qr"} and len(fallback_log) == len(warned)


def test_host_op_list_is_configurable(monkeypatch):
    torch_neuronx.set_host_ops(["mm"])
    try:
        torch_neuronx.clear_op_tracking()
        torch.randn(3, 4, device="neuron") @ torch.randn(4, 2, device="neuron")
        assert torch_neuronx.get_fallback_ops() == ["aten::mm"]
    finally:
        torch_neuronx.set_host_ops(host_ops.DEFAULT_HOST_OPS)
    monkeypatch.setenv("TORCHNEURON_HOST_OPS", " qr, _linalg_svd ,")
    assert host_ops.host_ops_from_env() == ("qr", "_linalg_svd")
    monkeypatch.delenv("TORCHNEURON_HOST_OPS")
    assert host_ops.host_ops_from_env() == host_ops.DEFAULT_HOST_OPS


@pytest.mark.parametrize("name, key", [
    ("aten::_linalg_svd", "svd"), ("aten::linalg_cholesky_ex.L", "cholesky"),
    ("aten::_linalg_slogdet.sign", "slogdet"), ("aten::mm", "mm"), ("linalg_inv_ex", "inv"),
])
def test_normalize(name, key):
    assert host_ops.normalize(name) == key


def test_metrics_snapshot_and_export(tmp_path):
    torch_neuronx.reset_metrics()
    big = torch.empty(1 << 20, device="neuron")  # 4 MiB on core 0
    (big + 1).sum()
    m = torch_neuronx.metrics()
    assert m["schema"] == 1 and m["accounting_enabled"] is True
    core0 = m["memory"]["cores"][0]
    assert core0["peak_bytes"] >= 2 * big.nbytes
    assert core0["capacity_bytes"] == torch.neuron.mem_get_info(0)[1]
    assert core0["peak_fraction"] == pytest.approx(core0["peak_bytes"] / core0["capacity_bytes"])
    # the allocator's segments hold the tensors' blocks: reserved >= allocated, now and at the peak
    assert core0["peak_reserved_bytes"] >= core0["peak_bytes"] and core0["reserved_bytes"] >= core0["allocated_bytes"]
    assert core0["reserved_bytes"] == torch.neuron.memory_reserved(0)
    assert m["int64_float64_mode"] == torch_neuronx.get_64bit_mode()
    assert json.dumps(m)  # plain JSON types only

    json_path, csv_path = torch_neuronx.export_metrics(tmp_path)
    exported = json.loads(json_path.read_text())
    assert exported["kernels"] == m["kernels"]
    rows = list(csv.DictReader(csv_path.open()))
    assert [r["op"] for r in rows[:-1]] == list(m["kernels"]["per_op"])
    total = rows[-1]
    assert total["op"] == "(all)" and int(total["misses"]) == m["kernels"]["misses"]
    assert float(total["estimated_compile_seconds"]) == pytest.approx(m["estimated_compile_seconds"])

    del big
    torch_neuronx.reset_metrics()
    after = torch_neuronx.metrics()
    assert after["kernels"]["calls"] == 0 and after["executed_ops"] == []
    assert after["memory"]["cores"][0]["peak_bytes"] < core0["peak_bytes"]


def test_env_switches(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    assert make_accounting("trn2", 2).cache.directory == tmp_path
    for name in ("TORCH_NEURONX_NEFF_DISABLE_CACHE", "TORCH_NEURONX_DISABLE_NEFF_CACHE"):
        monkeypatch.setenv(name, "1")
        assert make_accounting("trn2", 2).cache is None
        monkeypatch.delenv(name)
    monkeypatch.setenv("NEURON_CC_FLAGS", "--foo")
    flagged = salt_of(make_accounting("trn2", 2).config)
    monkeypatch.delenv("NEURON_CC_FLAGS")
    assert flagged != salt_of(make_accounting("trn2", 2).config) != salt_of(make_accounting("trn1", 1).config)
    monkeypatch.setenv("TORCHNEURON_KERNEL_ACCOUNTING", "0")
    assert enabled_from_env() is False
    monkeypatch.setenv("TORCHNEURON_COMPILE_SECONDS_PER_KERNEL", "0.5")
    assert compile_model().seconds_per_program == 0.5
    monkeypatch.setenv("TORCHNEURON_COMPILE_SECONDS_PER_KERNEL", "-1")
    with pytest.raises(ConfigError, match="non-negative"):
        compile_model()


@pytest.mark.parametrize("raw, level", [("3", logging.DEBUG), ("0", logging.ERROR), ("info", logging.INFO)])
def test_log_level(monkeypatch, raw, level):
    monkeypatch.setenv("TORCH_NEURONX_LOG_LEVEL", raw)
    assert run_log.configure().level == level
    monkeypatch.delenv("TORCH_NEURONX_LOG_LEVEL")
    run_log.configure()


def test_log_level_rejects_nonsense(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_LOG_LEVEL", "loud")
    with pytest.raises(ConfigError, match="TORCH_NEURONX_LOG_LEVEL"):
        run_log.configure()


def test_info_shows_cache_and_emulation(capsys, monkeypatch, private_neff_cache):
    monkeypatch.setenv("COLUMNS", "250")  # no wrapping of the long cache path
    torch.randn(31, device="neuron").sqrt()  # at least one entry in the cache
    info = info_cli.collect()
    cache = info["fidelity"]["neff_cache"]
    assert info["emulated"] is True and cache["enabled"]
    on_disk = [p for p in Path(cache["dir"]).glob("*/*.json") if not p.name.startswith(".tmp-")]
    assert cache["entries"] == len(on_disk) > 0
    info_cli.render(info)
    out = capsys.readouterr().out
    assert "emulated on the host" in out
    assert "NEFF cache" in out and f"{cache['entries']} entries" in out
    assert "(estimate)" in out
