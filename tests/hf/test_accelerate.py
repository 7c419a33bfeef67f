"""Accelerate, unchanged, on ``neuron``: device choice, state round-trip, multi-process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_models import REPO

SCRIPTS = Path(__file__).parent / "scripts"


def test_accelerator_picks_neuron():
    from accelerate import Accelerator
    from accelerate.utils import DistributedType, is_neuron_available

    assert is_neuron_available()
    accelerator = Accelerator()
    assert accelerator.device.type == "neuron"
    assert accelerator.distributed_type == DistributedType.NO
    model = accelerator.prepare(torch.nn.Linear(3, 3))
    assert next(model.parameters()).device.type == "neuron"


def test_save_state_load_state_round_trip(tmp_path):
    """Model, optimizer, scheduler and the neuron RNG (``torch_neuron_manual_seed``)
    come back exactly after further training changed all of them."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    set_seed(0)
    accelerator = Accelerator()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(optim, step_size=1, gamma=0.5)
    model, optim, sched = accelerator.prepare(model, optim, sched)
    x = torch.randn(4, 8, device=accelerator.device)

    def step():
        accelerator.backward(model(x).pow(2).mean())
        optim.step()
        sched.step()
        optim.zero_grad()

    step()
    accelerator.save_state(tmp_path)
    saved_model = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    saved_moments = [optim.state[p]["exp_avg"].cpu().clone() for p in model.parameters()]
    saved_lr = sched.get_last_lr()
    draw_after_save = torch.rand(5, device=accelerator.device).cpu()

    rng_file = tmp_path / "random_states_0.pkl"
    states = torch.load(rng_file, weights_only=False)
    assert "torch_neuron_manual_seed" in states

    step()
    step()
    assert not torch.equal(model.state_dict()["0.weight"].cpu(), saved_model["0.weight"])

    accelerator.load_state(tmp_path)
    for name, value in model.state_dict().items():
        assert value.device.type == "neuron"
        assert torch.equal(value.cpu(), saved_model[name]), name
    for p, moment in zip(model.parameters(), saved_moments):
        assert optim.state[p]["exp_avg"].device.type == "neuron"
        assert torch.equal(optim.state[p]["exp_avg"].cpu(), moment)
    assert sched.get_last_lr() == saved_lr
    assert torch.equal(torch.rand(5, device=accelerator.device).cpu(), draw_after_save)


@pytest.mark.slow
def test_multiprocess_picks_multi_neuron(tmp_path):
    """``accelerate launch`` (torchrun underneath), two processes: each gets
    MULTI_NEURON, the ``neuron`` process group, its own core (``neuron:LOCAL_RANK``),
    a correct gather, and identical DDP weights."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--multi_gpu"]
    proc = subprocess.run([*cmd, str(SCRIPTS / "accelerate_multiprocess.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=180, cwd=str(REPO),
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    ranks = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(2)]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["num_processes"] == 2
        assert r["distributed_type"] == "DistributedType.MULTI_NEURON"
        assert r["backend"] == "neuron" and r["pg_backend"] == "neuron"
        assert r["device"] == f"neuron:{r['rank']}"
        assert r["gathered"] == [1.0, 2.0]
    assert ranks[0]["weight"] == ranks[1]["weight"]
    # DDP averaged the two ranks' gradients: reproduce the step on CPU.
    torch.manual_seed(0)
    reference = torch.nn.Linear(4, 2)
    x = torch.cat([torch.full((2, 4), 1.0), torch.full((2, 4), 2.0)])
    (reference(x).sum() / 2).backward()
    with torch.no_grad():
        expected = reference.weight - 0.1 * reference.weight.grad
    torch.testing.assert_close(torch.tensor(ranks[0]["weight"]), expected)
