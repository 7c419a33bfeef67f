"""TorchTitan 0.3.0 unchanged on ``neuron`` (docs/torchtitan.md): its llama3 debug model under
torchrun, 1 process and FSDP over 2, two steps from TorchTitan's seed checkpoint, against the CPU
reference losses of the same job (``examples/torchtitan/cpu_reference.py``): the quickest check
that TorchTitan still trains here (``make test-titan``; a minute and more of CPU, so ``exhaustive``
and out of ``make test``). The larger layouts, ``--compile.enable``, checkpoint resume and bad
input are ``test_torchtitan_full.py``. Skipped when the ``titan`` extra is not installed.

The jobs run once, on the background lane (tests/README.md): a seed checkpoint, then the two
layouts, sharing the session's compile cache (the FSDP ranks find the graphs the single process
compiled).
"""
from __future__ import annotations

import re

import pytest

pytest.importorskip("torchtitan")

import children  # noqa: E402
from titan_harness import CPU_REFERENCE, LOSS_TOLERANCE, compare, prepare  # noqa: E402

pytestmark = pytest.mark.exhaustive
STEPS = 2


def _neuron_runs(folder, environ) -> dict:
    prepare(folder)
    seed = compare.seed_checkpoint(folder, environ)
    return {name: compare.run(folder, compare.LAYOUTS[name].nproc, "neuron",
                              compare.load_only(compare.LAYOUTS[name], STEPS, seed, folder / name),
                              environ=environ)
            for name in ("1", "fsdp2")}


neuron_runs = children.lane_fixture("neuron_runs", _neuron_runs, folder_prefix="torchneuron-titan-")


@pytest.mark.parametrize("name", ["1", "fsdp2"])
def test_losses_follow_the_cpu_reference(neuron_runs, name):
    run = neuron_runs[name].check()
    expected = CPU_REFERENCE[name]
    assert sorted(run.losses) == sorted(expected), run.log[-4000:]
    for step, loss in expected.items():
        assert abs(run.losses[step] - loss) <= LOSS_TOLERANCE, (step, run.losses, expected)


def test_logs_show_the_device_and_memory_per_core(neuron_runs):
    """TorchTitan's own lines: the emulated core and its HBM, and a nonzero memory peak per step
    (``torch.neuron.memory_stats``, an emulated count)."""
    log = neuron_runs["fsdp2"].check().log
    assert "NEURON capacity: neuron:0 with 24.00GiB memory" in log, log[-4000:]
    peaks = [float(gib) for gib in re.findall(r"step:\s+\d+\s.*memory:\s+([\d.]+)GiB", log)]
    assert len(peaks) >= STEPS and all(peak > 0 for peak in peaks), (peaks, log[-4000:])
