"""Saving and loading neuron tensors: torch.save/load, map_location, safetensors."""
from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from safetensors.torch import load_file, save_file, save_model, load_model

pytestmark = pytest.mark.fast


def _round_trip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def test_save_load_keeps_device_dtype_and_values():
    cpu = {"w": torch.randn(4, 5), "b": torch.arange(3), "h": torch.randn(2, 2).bfloat16()}
    state = {k: v.to("neuron:1") for k, v in cpu.items()}
    loaded = _round_trip(state)
    for k, v in cpu.items():
        assert loaded[k].device == torch.device("neuron:1")
        assert loaded[k].dtype == v.dtype
        assert torch.equal(loaded[k].cpu(), v)


def test_save_load_preserves_view_sharing():
    base = torch.randn(6, device="neuron")
    loaded = _round_trip({"base": base, "view": base[2:]})
    loaded["view"].zero_()
    assert loaded["base"][2:].eq(0).all()
    assert not loaded["base"][:2].eq(0).all()


@pytest.mark.parametrize("map_location,expected", [
    ("cpu", "cpu"),
    ("neuron:1", "neuron:1"),
    (torch.device("neuron", 3), "neuron:3"),
    ({"neuron:0": "neuron:2"}, "neuron:2"),
    (lambda storage, loc: storage, "cpu"),  # a callable decides, as for CUDA
])
def test_map_location(map_location, expected):
    cpu = torch.randn(3, 3)
    loaded = _round_trip({"t": cpu.to("neuron:0")}, map_location=map_location)
    assert loaded["t"].device == torch.device(expected)
    assert torch.equal(loaded["t"].cpu(), cpu)


def test_cpu_checkpoint_to_neuron():
    cpu = torch.randn(8)
    loaded = _round_trip(cpu, map_location="neuron:1")
    assert loaded.device == torch.device("neuron:1")
    assert torch.equal(loaded.cpu(), cpu)


def test_module_state_dict_round_trip(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8)).to("neuron")
    model(torch.randn(5, 4, device="neuron"))  # updates the BatchNorm buffers
    path = tmp_path / "m.pt"
    torch.save(model.state_dict(), path)
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8)).to("neuron")
    fresh.load_state_dict(torch.load(path, weights_only=True))
    for (k, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a.cpu(), b.cpu()), k


def test_safetensors_round_trip(tmp_path):
    cpu = {"a": torch.randn(3, 4), "b": torch.randint(0, 9, (5,)), "c": torch.randn(2).half()}
    path = tmp_path / "t.safetensors"
    save_file({k: v.to("neuron") for k, v in cpu.items()}, str(path))
    # safetensors' reader knows only its built-in device names, so checkpoints
    # are read on the host and moved, as Transformers does.
    loaded = {k: v.to("neuron:2") for k, v in load_file(str(path)).items()}
    for k, v in cpu.items():
        assert loaded[k].device == torch.device("neuron:2")
        assert torch.equal(loaded[k].cpu(), v)


def test_safetensors_shared_tensors(tmp_path):
    # Tied weights (embedding = lm_head) share storage; save_model dedups them
    # and load_model restores both.
    model = torch.nn.ModuleDict({"emb": torch.nn.Embedding(10, 4), "head": torch.nn.Linear(4, 10)})
    model["head"].weight = model["emb"].weight
    model = model.to("neuron")
    path = tmp_path / "tied.safetensors"
    save_model(model, str(path))
    other = torch.nn.ModuleDict({"emb": torch.nn.Embedding(10, 4), "head": torch.nn.Linear(4, 10)})
    other["head"].weight = other["emb"].weight
    other = other.to("neuron")
    missing, unexpected = load_model(other, str(path))
    assert not missing and not unexpected
    assert torch.equal(other["emb"].weight.cpu(), model["emb"].weight.cpu())
    assert other["head"].weight is other["emb"].weight
    with pytest.raises(RuntimeError, match="share memory"):
        save_file({"x": model["emb"].weight, "y": model["head"].weight}, str(path))


def test_pickle_and_deepcopy():
    t = torch.randn(3, device="neuron:2", requires_grad=True)
    for clone in (pickle.loads(pickle.dumps(t)), copy.deepcopy(t)):
        assert clone.device == torch.device("neuron:2")
        assert clone.requires_grad
        assert torch.equal(clone.detach().cpu(), t.detach().cpu())
        assert clone.data_ptr() != t.data_ptr()
    dev = torch.device("neuron:3")
    assert pickle.loads(pickle.dumps(dev)) == dev
