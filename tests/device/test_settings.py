"""The settings registry: one declaration per environment variable, the
generated configuration page, typed reads and their errors, and the switches
that reach more than one layer (cache off, reconfigure)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_neuronx
from torch_neuronx import accounting
from torch_neuronx.accounting.signatures import make_accounting
from torch_neuronx.runtime import cache_dirs, settings
from torch_neuronx.runtime.errors import ConfigError, first_line

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
GiB = 1024**3


def test_configuration_page_is_generated_from_the_registry():
    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert page == settings.markdown(), (
        "docs/configuration.md is stale: run "
        "`python -m torch_neuronx.runtime.settings --markdown > docs/configuration.md`")


def _python_sources():
    for folder in ("torch_neuronx", "tests", "benchmarks", "examples"):
        yield from (REPO / folder).rglob("*.py")


def test_every_project_variable_in_the_tree_is_declared():
    declared = {name for s in settings.REGISTRY.values() for name in (s.name, *s.aliases)}
    pattern = re.compile(r"\b(?:TORCHNEURON|TORCH_NEURONX|NEURON)_[A-Z0-9_]+\b")
    found = {m for path in _python_sources() for m in pattern.findall(path.read_text(encoding="utf-8"))}
    assert found, "the scan found nothing: the pattern is broken"
    assert found - declared == set()


def test_the_core_reads_the_environment_only_through_the_registry():
    core = ("runtime", "neuron", "amp", "numerics", "accounting", "compile", "distributed", "debug")
    read = re.compile(r"os\.getenv\(|os\.environ\.get\(|os\.environ\[[^\]]+\](?!\s*=)|env_(?:flag|int|str|choice)\(")
    offenders = [
        f"{path.relative_to(REPO)}:{n}"
        for pkg in core for path in (REPO / "torch_neuronx" / pkg).rglob("*.py")
        if path.name != "settings.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if read.search(line)
    ]
    assert offenders == []


@pytest.mark.parametrize("raw", ["abc", "-5", "1.5"])
def test_host_pool_size_rejects_bad_values(monkeypatch, raw):
    monkeypatch.setenv("TORCHNEURON_HOST_POOL_MB", raw)
    with pytest.raises(ConfigError, match=r"TORCHNEURON_HOST_POOL_MB=.* is not a non-negative integer"):
        settings.get_int("TORCHNEURON_HOST_POOL_MB")


def test_typed_getters(monkeypatch):
    monkeypatch.setenv("TORCHNEURON_64BIT", "STRICT")
    assert settings.get_choice("TORCHNEURON_64BIT") == "strict"
    monkeypatch.setenv("TORCHNEURON_HOST_OPS", " qr, ,svd ")
    assert settings.get_list("TORCHNEURON_HOST_OPS") == ("qr", "svd")
    monkeypatch.setenv("TORCHNEURON_COMPILE_SECONDS_PER_KERNEL", "")
    assert settings.get_float("TORCHNEURON_COMPILE_SECONDS_PER_KERNEL") is None  # empty means unset
    monkeypatch.setenv("TORCHNEURON_KERNEL_ACCOUNTING", "maybe")
    with pytest.raises(ConfigError, match="not a boolean"):
        settings.get_flag("TORCHNEURON_KERNEL_ACCOUNTING")
    with pytest.raises(TypeError, match="declared as 'int'"):
        settings.get_flag("TORCHNEURON_HOST_POOL_MB")
    with pytest.raises(KeyError, match="not declared"):
        settings.get_str("TORCHNEURON_" + "UNDECLARED")


def test_first_line_of_an_exception():
    assert first_line(RuntimeError("boom\nsecond line")) == "RuntimeError: boom"
    assert first_line(ValueError("")) == "ValueError"
    assert first_line(KeyError("x" * 50), limit=5) == "KeyError: 'xxxx"


@pytest.mark.parametrize("name", ["TORCH_NEURONX_NEFF_DISABLE_CACHE", "TORCH_NEURONX_DISABLE_NEFF_CACHE"])
def test_disabling_the_cache_turns_off_both_caches(monkeypatch, name):
    monkeypatch.setenv(name, "1")
    assert make_accounting("trn2", 2).cache is None
    assert not cache_dirs.persistent_cache_enabled()
    torch._dynamo.reset()
    torch_neuronx.reset_dynamo_metrics()
    fn = torch.compile(lambda x: torch.sin(x) * 3 + 1, backend="neuron")
    x = torch.randn(7, 3, device="neuron")
    torch.testing.assert_close(fn(x).cpu(), torch.sin(x.cpu()) * 3 + 1)
    m = torch_neuronx.get_dynamo_metrics()
    assert m["aot_graphs_compiled"] == 1
    assert m["cache_hits"] == m["cache_misses"] == 0  # the FX graph cache was not consulted


def test_cache_directories_share_one_root(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    assert cache_dirs.neff_dir() == tmp_path
    assert cache_dirs.compile_dir() == tmp_path / "compile"
    # Another root (a child process's, configured by its caller) maps the same way, whatever this process's.
    assert cache_dirs.compile_dir(str(tmp_path / "child")) == tmp_path / "child" / "compile"
    monkeypatch.delenv("TORCH_NEURONX_NEFF_CACHE_DIR")
    assert cache_dirs.neff_dir().parent == cache_dirs.compile_dir().parent


def _signatures_after_add() -> int:
    a = torch.ones(3, 5, device="neuron")
    a.add_(a)
    return torch_neuronx.metrics()["kernels"]["per_op"]["aten::add_.Tensor"]["signatures"]


def test_reconfigure_switches_instance_capacity_and_signature_salt(clean_topology_env):
    before = torch.neuron.topology()
    capacity = torch.neuron.get_device_properties(0).total_memory
    assert torch_neuronx.kernel_accounting_enabled()
    torch_neuronx.reset_metrics()
    assert _signatures_after_add() == _signatures_after_add() == 1
    try:
        with clean_topology_env.context() as env:
            torch_neuronx.reconfigure(instance="trn1.2xlarge")
            assert torch.neuron.topology().profile.name == "trn1.2xlarge"
            props = torch.neuron.get_device_properties(0)
            assert (props.name, props.instance_type, props.logical_nc_config) == ("trn1", "trn1.2xlarge", 1)
            assert props.total_memory == 16 * GiB and torch.neuron.device_count() == 2
            assert (accounting._accounting.config["target"],
                    accounting._accounting.config["logical_nc_config"]) == ("trn1", 1)
            import os
            assert os.environ["TORCHNEURON_INSTANCE"] == "trn1.2xlarge"  # child processes follow
            # The C++ signature salt follows: the same kernel is a new signature for trn1.
            assert _signatures_after_add() == 2
            torch_neuronx.reconfigure(hbm_per_core=GiB)
            assert torch.neuron.get_device_properties(1).total_memory == GiB
            assert torch.neuron.mem_get_info(1)[1] == GiB
            with pytest.raises(ConfigError, match="not a known instance profile"):
                torch_neuronx.reconfigure(instance="trn9.huge")
            assert os.environ["TORCHNEURON_INSTANCE"] == "trn1.2xlarge"  # nothing changed
            assert torch.neuron.get_device_properties(0).instance_type == "trn1.2xlarge"
            env.setenv("TORCHNEURON_INSTANCE", before.profile.name)
            torch_neuronx.reconfigure()
            # Back on the original target's salt: a signature already known.
            assert _signatures_after_add() == 2
    finally:
        # Exactly the state before the test, whatever the environment says now.
        neuron = torch.neuron
        neuron._configure(before, capacity)
        accounting.reconfigure(before)
    assert torch.neuron.topology() == before
