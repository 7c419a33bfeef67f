"""``torch.neuron``: the device module of the ``neuron`` backend.

The API follows ``torch.cuda`` and the real TorchNeuron product, so code
written for either (Transformers, Accelerate, FSDP2, DeviceMesh) works
unchanged. Device management lives here; random state, streams and memory
have their own modules and are re-exported. The compile layer adds its
entries (``get_dynamo_metrics``, Inductor's device hooks) when it installs.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..runtime.extension import _C
from ..runtime import settings
from ..runtime.errors import ConfigError
from ..runtime.profiles import Topology
from .device_index import current_device  # noqa: F401
from .device_index import device_count as _visible_cores
from .device_index import index as _index
from .memory import (  # noqa: F401  (re-exported API)
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
)
from .random import (  # noqa: F401
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (  # noqa: F401
    Event,
    Stream,
    current_stream,
    default_stream,
    set_stream,
    stream,
)
from . import autograd_workers  # noqa: F401  (its exit handler: torch_neuronx._register)
from . import memory  # noqa: F401  (torch.neuron.memory, as in the real product)

_topology: Topology | None = None
# The configuration error found at import, raised at the first device use instead.
_config_error: ConfigError | None = None


def _configure(topology: Topology, hbm_per_core: int | None = None) -> None:
    """Apply a topology and the device settings to the C++ core: the one place
    device configuration happens (at import and in ``torch_neuronx.reconfigure``).

    ``hbm_per_core`` overrides the profile's capacity (a what-if for smaller cores).
    """
    global _topology
    _C._set_fused_attention(settings.get_flag("TORCH_NEURONX_ENABLE_NKI_SDPA"))
    _C._install_host_pool(settings.get_int("TORCHNEURON_HOST_POOL_MB") * 2**20)
    random.configure_rng_source()
    _C._configure_devices(topology.device_count, hbm_per_core or topology.hbm_per_core)
    if topology.device_count:
        _C._set_default_device(topology.default_device)
    _topology = topology


def topology() -> Topology:
    """The configured cores; raises the configuration error deferred at import."""
    if _config_error is not None:
        raise ConfigError(str(_config_error))
    assert _topology is not None, "torch_neuronx was not initialised"
    return _topology


@dataclasses.dataclass(frozen=True)
class NeuronDeviceProperties:
    """What ``get_device_properties`` returns; ``name`` is the instance family."""

    name: str
    total_memory: int
    instance_type: str
    logical_nc_config: int
    index: int
    emulated: bool = True

    def __repr__(self) -> str:
        return (
            f"NeuronDeviceProperties(name='{self.name}', total_memory={self.total_memory // 2**20}MB, "
            f"instance_type='{self.instance_type}', logical_nc_config={self.logical_nc_config}, "
            f"index={self.index}, emulated={self.emulated})"
        )


def device_count() -> int:
    """The visible cores; a configuration error deferred at import is raised here rather
    than the default topology's count, which would describe cores the process cannot use."""
    _check_config()
    return _visible_cores()


def is_available() -> bool:
    try:
        return device_count() > 0
    except Exception:
        return False


def set_device(device: Any) -> None:
    _C._set_device(_index(device))


class device:
    """Context manager that makes ``device`` current, like ``torch.cuda.device``."""

    def __init__(self, device: Any):
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = current_device()
            set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0:
            set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of ``tensor`` current."""

    def __init__(self, tensor: torch.Tensor):
        super().__init__(tensor.device if tensor.device.type == "neuron" else None)


def get_device_name(device: Any = None) -> str:
    return f"neuron:{_index(device)}"


def get_device_properties(device: Any = None) -> NeuronDeviceProperties:
    idx = _index(device)
    topo = topology()
    init()  # the real product initialises the runtime to read the HBM size
    return NeuronDeviceProperties(
        name=topo.profile.family,
        total_memory=_C._device_capacity(idx),
        instance_type=topo.profile.name,
        logical_nc_config=topo.lnc,
        index=idx,
    )


def get_device_capability(device: Any = None) -> dict:
    """The dtypes the device accepts (as ``torch.accelerator.get_device_capability``)."""
    return torch.accelerator.get_device_capability(torch.device("neuron", _index(device)))


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float32, torch.float16, torch.bfloat16]


def synchronize(device: Any = None) -> None:
    """Kernels run synchronously on the host, so there is never work to wait for."""
    _index(device)


def is_initialized() -> bool:
    return _C._is_initialized()


def defer_config_error(error: ConfigError) -> None:
    """Make the first device use raise ``error`` (``import torch`` succeeded without it).

    PyTorch calls ``_lazy_init`` before a factory or copy names the device, which
    raises the ``ConfigError`` itself; the C++ core refuses any other first
    allocation with the same message.
    """
    global _config_error
    _config_error = error
    _C._set_init_error(f"{type(error).__name__}: {error}")


def config_error() -> ConfigError | None:
    """The configuration error deferred at import, if any."""
    return _config_error


def _check_config() -> None:
    if _config_error is not None:
        raise ConfigError(str(_config_error))


def init() -> None:
    """Initialise the runtime, as the real product's ``torch_neuronx._lazy_init``:
    a child forked after this refuses to initialise again (``_is_in_bad_fork``)."""
    _check_config()
    _C._initialize_runtime()


def _lazy_init() -> None:
    """PyTorch's hook before a factory or copy names the device. The real product's
    device module has none, so it neither marks an initialisation a forked child
    would refuse nor refuses one: it only raises the deferred configuration error."""
    _check_config()
    _C._init()


def _is_in_bad_fork() -> bool:
    """True in a child forked after ``init()``, ``get_device_properties()`` or
    ``init_process_group("neuron")`` ran (runtime/Fork.cpp); the child's tensors and
    ops keep working (host memory survives fork), initialising again raises."""
    return _C._in_bad_fork()


def _sleep(cycles: int) -> None:
    """No-op, as in the real product."""
