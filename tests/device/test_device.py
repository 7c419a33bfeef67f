"""The ``neuron`` device: registration, ``torch.neuron`` / ``torch.accelerator``
API, instance profiles and topology, device indices and cross-device copies."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
import torch

from torch_neuronx.runtime import profiles
from torch_neuronx.runtime.errors import ConfigError
from torch_neuronx.runtime.profiles import TOPOLOGY_ENV

pytestmark = pytest.mark.fast


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (import-time behaviour) with ``env`` set."""
    full_env = {k: v for k, v in os.environ.items() if k not in TOPOLOGY_ENV}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def clean_env(clean_topology_env):
    return clean_topology_env


# ---- registration -------------------------------------------------------------------

def test_backend_is_registered_as_neuron():
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    assert torch.neuron is sys.modules["torch_neuronx.neuron"]
    t = torch.ones(3).neuron()
    assert t.device == torch.device("neuron", torch.neuron.current_device())
    assert t.is_neuron and not torch.ones(1).is_neuron
    assert t.untyped_storage().device.type == "neuron"
    assert torch.nn.Linear(2, 2).neuron().weight.device.type == "neuron"


def test_autoload_can_be_turned_off():
    proc = run_python("import torch; print(hasattr(torch, 'neuron'))",
                      TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


# ---- torch.neuron API -----------------------------------------------------------------

def test_device_api_default_profile():
    assert torch.neuron.is_available()
    assert torch.neuron.device_count() == 4  # trn2.3xlarge, LNC=2
    assert torch.neuron.current_device() == 0
    assert torch.neuron.get_device_name() == "neuron:0"
    assert torch.neuron.get_device_name(2) == "neuron:2"
    props = torch.neuron.get_device_properties(1)
    assert props.name == "trn2"
    assert props.total_memory == 24 * 2**30
    assert props.instance_type == "trn2.3xlarge"
    assert torch.neuron.is_bf16_supported()
    assert torch.bfloat16 in torch.neuron.get_amp_supported_dtype()
    torch.neuron.init()
    assert torch.neuron.is_initialized()
    torch.neuron.synchronize()
    torch.neuron.synchronize("neuron:3")


def test_set_device_and_context_manager():
    assert torch.neuron.current_device() == 0
    with torch.neuron.device(2):
        assert torch.neuron.current_device() == 2
        assert torch.empty(1, device="neuron").device == torch.device("neuron:2")
        with torch.neuron.device("neuron:1"):
            assert torch.ones(1).neuron().device.index == 1
        assert torch.neuron.current_device() == 2
    assert torch.neuron.current_device() == 0
    torch.neuron.set_device(torch.device("neuron", 3))
    try:
        assert torch.empty(1, device="neuron").device.index == 3
    finally:
        torch.neuron.set_device(0)


def test_accelerator_api():
    acc = torch.accelerator
    assert acc.is_available()
    assert acc.current_accelerator() == torch.device("neuron")
    assert acc.device_count() == torch.neuron.device_count()
    acc.set_device_index(1)
    try:
        assert acc.current_device_index() == 1 == torch.neuron.current_device()
    finally:
        acc.set_device_index(0)
    acc.synchronize()
    s = acc.current_stream()
    assert s.device == torch.device("neuron:0")
    x = torch.arange(6.0, device="neuron")
    assert acc.memory_allocated() >= x.nbytes


@pytest.mark.parametrize("bad", [4, 17, -2, "neuron:9"])
def test_invalid_device_index_is_a_clear_error(bad):
    device = bad if isinstance(bad, str) else torch.device("neuron", bad) if bad >= 0 else bad
    with pytest.raises((RuntimeError, ValueError), match=r"(?i)neuron|device"):
        torch.empty(2, device=device)
    if isinstance(bad, int) and bad >= 0:
        with pytest.raises(RuntimeError, match="Invalid neuron device index"):
            torch.neuron.set_device(bad)
        with pytest.raises(RuntimeError, match="valid indices 0..3"):
            torch.ones(2).to(f"neuron:{bad}")
    assert torch.neuron.current_device() == 0  # nothing changed


def test_wrong_device_type_is_rejected():
    with pytest.raises(ValueError, match="Expected a neuron device"):
        torch.neuron.set_device("cpu")
    with pytest.raises(TypeError):
        torch.neuron.get_device_name(1.5)


def test_device_pickles():
    for d in (torch.device("neuron"), torch.device("neuron", 2)):
        assert pickle.loads(pickle.dumps(d)) == d


# ---- instance profiles and topology ------------------------------------------------------

@pytest.mark.parametrize("name,family,cores,hbm_gib", [
    ("trn1.2xlarge", "trn1", 2, 16),
    ("trn1.32xlarge", "trn1", 32, 16),
    ("trn2.3xlarge", "trn2", 4, 24),
    ("trn2.48xlarge", "trn2", 64, 24),
    ("trn3", "trn3", 4, 36),
])
def test_profiles_default_topology(clean_env, name, family, cores, hbm_gib):
    clean_env.setenv("TORCHNEURON_INSTANCE", name)
    topo = profiles.resolve_topology()
    assert topo.profile.family == family
    assert topo.device_count == cores
    assert topo.hbm_per_core == hbm_gib * 2**30
    assert topo.default_device == 0 and not topo.distributed


def test_unconfirmed_figures_are_marked():
    assert {p.name for p in profiles.PROFILES.values() if not p.confirmed} >= {"trn3"}


def test_lnc1_doubles_cores_and_halves_memory(clean_env):
    clean_env.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    topo = profiles.resolve_topology()
    assert (topo.lnc, topo.device_count, topo.hbm_per_core) == (1, 8, 12 * 2**30)


@pytest.mark.parametrize("value", ["3", "0", "two"])
def test_bad_lnc_is_a_clear_error(clean_env, value):
    clean_env.setenv("NEURON_LOGICAL_NC_CONFIG", value)
    with pytest.raises(ConfigError, match="NEURON_LOGICAL_NC_CONFIG"):
        profiles.resolve_topology()


def test_lnc2_on_trn1_is_rejected(clean_env):
    clean_env.setenv("TORCHNEURON_INSTANCE", "trn1.2xlarge")
    clean_env.setenv("NEURON_LOGICAL_NC_CONFIG", "2")
    with pytest.raises(ConfigError, match="not supported on trn1.2xlarge"):
        profiles.resolve_topology()


def test_unknown_instance_is_a_clear_error(clean_env):
    clean_env.setenv("TORCHNEURON_INSTANCE", "trn9.huge")
    with pytest.raises(ConfigError, match="trn2.3xlarge"):
        profiles.resolve_topology()


@pytest.mark.parametrize("cores,count", [("2", 1), ("0-2", 3), ("0,3", 2), ("1-2,3", 3)])
def test_visible_cores(clean_env, cores, count):
    clean_env.setenv("NEURON_RT_VISIBLE_CORES", cores)
    assert profiles.resolve_topology().device_count == count


@pytest.mark.parametrize("cores", ["4", "a-b", "3-1"])
def test_bad_visible_cores(clean_env, cores):
    clean_env.setenv("NEURON_RT_VISIBLE_CORES", cores)
    with pytest.raises(ConfigError, match="NEURON_RT_VISIBLE_CORES"):
        profiles.resolve_topology()


def test_num_cores(clean_env):
    clean_env.setenv("NEURON_RT_NUM_CORES", "2")
    assert profiles.resolve_topology().device_count == 2
    clean_env.setenv("NEURON_RT_NUM_CORES", "5")
    with pytest.raises(ConfigError, match="more cores than the 4 visible"):
        profiles.resolve_topology()


def test_torchrun_one_core_per_rank(clean_env):
    clean_env.setenv("LOCAL_WORLD_SIZE", "2")
    clean_env.setenv("LOCAL_RANK", "1")
    topo = profiles.resolve_topology()
    assert (topo.device_count, topo.default_device, topo.distributed) == (2, 1, True)
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "1"


def test_plain_import_torch_resolves_topology_at_import():
    # No torch_neuronx import: the backend autoload entry point registers it.
    code = ("import torch; p = torch.neuron.get_device_properties(); "
            "t = torch.ones(2, device='neuron:2'); "
            "print(torch.neuron.device_count(), p.name, p.total_memory // 2**30, t.device)")
    proc = run_python(code, TORCHNEURON_INSTANCE="trn1.32xlarge", NEURON_RT_NUM_CORES="3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "trn1", "16", "neuron:2"]
    # A bad topology no longer breaks the import: the first device use raises (test_config_errors.py).
    bad = run_python("import torch_neuronx; torch_neuronx.neuron.init()", NEURON_LOGICAL_NC_CONFIG="4")
    assert bad.returncode != 0
    assert "NEURON_LOGICAL_NC_CONFIG=4 is invalid" in bad.stderr


# ---- copies and device mixing ----------------------------------------------------------

def test_host_device_round_trip_all_dtypes():
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int8,
                  torch.uint8, torch.bool, torch.complex64):
        cpu = torch.randn(5, 3).to(dtype)
        dev = cpu.to("neuron")
        assert dev.dtype == dtype and dev.device.type == "neuron"
        torch.testing.assert_close(dev.cpu(), cpu, rtol=0, atol=0)


def test_copy_between_cores_including_non_contiguous():
    base = torch.randn(6, 8)
    src = base.to("neuron:0")
    for view in (src, src.t(), src[::2, 1::3], src.unsqueeze(0).expand(3, 6, 8)):
        moved = view.to("neuron:1")
        assert moved.device == torch.device("neuron:1")
        torch.testing.assert_close(moved.cpu(), view.cpu(), rtol=0, atol=0)
    dst = torch.zeros(8, 6, device="neuron:2")
    dst.copy_(src.t())
    torch.testing.assert_close(dst.cpu(), base.t(), rtol=0, atol=0)
    strided_dst = torch.zeros(8, 12, device="neuron:1")[:, ::2]
    strided_dst.copy_(src.t())
    torch.testing.assert_close(strided_dst.cpu(), base.t(), rtol=0, atol=0)
    # Non-contiguous host -> device and device -> non-contiguous host
    host_dst = torch.zeros(8, 6)
    host_dst.copy_(src.t())
    torch.testing.assert_close(host_dst, base.t(), rtol=0, atol=0)
    assert torch.equal(base.t().to("neuron:3").cpu(), base.t())


def test_cross_core_result_memory_is_charged_to_its_core():
    before = [torch.neuron.memory_allocated(i) for i in range(2)]
    x = torch.ones(1024, device="neuron:0").to("neuron:1")
    y = x * 2  # computed on core 1
    assert y.device == torch.device("neuron:1")
    assert torch.neuron.memory_allocated(1) - before[1] == 2 * 4096
    assert torch.neuron.memory_allocated(0) == before[0]


def test_mixing_cpu_and_neuron_is_the_usual_error():
    a = torch.ones(3, device="neuron")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.ones(3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.mm(torch.ones(2, 2), torch.ones(2, 2, device="neuron"))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.ones(3, device="neuron:1")
    # CPU scalars (0-dim) are allowed, as on CUDA
    torch.testing.assert_close((a + torch.tensor(2.0)).cpu(), torch.full((3,), 3.0))


def test_item_and_printing():
    t = torch.tensor([1.5, 2.5], device="neuron")
    assert t[1].item() == 2.5
    assert "device='neuron:0'" in repr(t)
    assert bool((t > 2).any())


def test_module_to_keeps_tied_parameters_tied():
    """Tied embeddings must stay one tensor on the device, as on CUDA."""
    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(16, 8)
    model.head = torch.nn.Linear(8, 16, bias=False)
    model.head.weight = model.embed.weight
    model.to("neuron")
    assert model.head.weight is model.embed.weight
    assert model.embed.weight.device.type == "neuron"


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_histc_matches_cpu_for_integer_and_float_inputs(dtype):
    """Transformers' MoE routing counts integer expert ids with histc."""
    cpu = torch.randint(0, 8, (64,)).to(dtype)
    out = torch.histc(cpu.to("neuron"), bins=8, min=0, max=7)
    expected = torch.histc(cpu.double(), bins=8, min=0, max=7).to(dtype)
    assert out.device.type == "neuron" and out.dtype == dtype
    torch.testing.assert_close(out.cpu(), expected)
