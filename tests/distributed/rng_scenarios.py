"""What each rank of the DTensor random-number tests runs: a sharded draw
(``torch.nn.init``, DTensor factories, dropout) against the same draw made
whole on this rank's core after the same ``torch.manual_seed``."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_neuronx
from scenarios import _init, _same
from torch.distributed import tensor as dtensor
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard

SEED = 1234

INITS = {
    "trunc_normal_": lambda t: nn.init.trunc_normal_(t, std=0.02),
    "normal_": lambda t: nn.init.normal_(t, mean=0.5, std=2.0),
    "uniform_": lambda t: nn.init.uniform_(t, -0.3, 0.7),
    "kaiming_uniform_": lambda t: nn.init.kaiming_uniform_(t, a=5 ** 0.5),
    "xavier_normal_": nn.init.xavier_normal_,
    "bernoulli_": lambda t: t.bernoulli_(0.3),
}


def _layouts(world: int):
    """(mesh, placements, shape): 1-D over every rank, TP over 2, FSDP x TP (2-D),
    uneven shards, shards of dim 1 and of both dims, FSDP2's strided shard."""
    flat = init_device_mesh("neuron", (world,))
    two_d = init_device_mesh("neuron", (world // 2, 2), mesh_dim_names=("dp", "tp"))
    return [
        (flat, [Shard(0)], (10, 8)),  # uneven: 3, 3, 3, 1 rows
        (flat, [Shard(1)], (10, 8)),
        (flat, [Replicate()], (10, 8)),
        (two_d["tp"], [Shard(1)], (6, 10)),
        (two_d, [Shard(0), Shard(1)], (10, 8)),
        (two_d, [Shard(1), Shard(0)], (10, 8)),
        (two_d, [Replicate(), Shard(0)], (10, 8)),
        (two_d, [Shard(0), Shard(0)], (8, 6)),
        (two_d, [_StridedShard(0, split_factor=2), Shard(0)], (8, 6)),
    ], two_d


def _state() -> torch.Tensor:
    return torch.neuron.get_rng_state()


def _init_ops(dev, layouts):
    for mesh, placements, shape in layouts:
        for name, init in INITS.items():
            what = f"{name} on {placements} over mesh {tuple(mesh.shape)}"
            torch.manual_seed(SEED)
            whole = [init(torch.empty(shape, device=dev)) for _ in range(2)]
            state_after_whole = _state()
            torch.manual_seed(SEED)
            sharded = dtensor.empty(shape, device_mesh=mesh, placements=placements)
            for i, expected in enumerate(whole):  # twice: offsets advance in step
                init(sharded)
                _same(sharded.full_tensor(), expected, f"{what}, draw {i + 1}")
            _same(_state(), state_after_whole, f"generator state after {what}")
        torch.manual_seed(SEED)
        expected = torch.randn(shape, device=dev)
        torch.manual_seed(SEED)
        got = dtensor.randn(shape, device_mesh=mesh, placements=placements)
        _same(got.full_tensor(), expected, f"distributed randn on {placements}")


def _model_init(dev, two_d):
    """A TP x FSDP2 model built on meta, then initialised (as TorchTitan does):
    the same parameters as the model made whole on one core."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    def build():
        return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 12))

    torch.manual_seed(SEED)
    whole = build().to(dev)
    for layer in (whole[0], whole[2]):
        layer.reset_parameters()
    with torch.device("meta"):
        model = build()
    parallelize_module(model, two_d["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=two_d["dp"])
    model.to_empty(device=dev)
    torch.manual_seed(SEED)
    for layer in (model[0], model[2]):
        layer.reset_parameters()
    for (name, p), q in zip(model.named_parameters(), whole.parameters()):
        assert isinstance(p, DTensor), name
        _same(p.full_tensor(), q, f"TP x FSDP2 parameter {name} ({p.placements})")


def _dropout(dev, tp):
    """Dropout in a TP region: replicated activations draw one mask on every TP
    rank, sequence-sharded ones the matching slices of it."""
    x = torch.randn(4, 6, 8, generator=torch.Generator().manual_seed(1)).to(dev)
    torch.manual_seed(SEED)
    expected = F.dropout(x, 0.5, training=True)
    for placements in ([Replicate()], [Shard(1)]):
        torch.manual_seed(SEED)
        got = F.dropout(dtensor.distribute_tensor(x, tp, placements), 0.5, training=True)
        _same(got.full_tensor(), expected, f"dropout on {placements}")
        if placements == [Replicate()]:
            _same(got.to_local(), expected, "replicated dropout: the whole mask on each rank")


def _dropout_on_the_cpu_source(dev, tp):
    """Under the default source a DTensor's dropout still draws from the neuron generator
    (DTensor's region restores the CPU generator after each op, so CPU draws there would
    repeat): each call draws a new mask, and the shards make up what the counter source
    draws whole after the same seed."""
    x = torch.ones(4, 6, 8, device=dev)
    torch_neuronx.set_rng_source("counter")
    torch.manual_seed(SEED)
    expected = [F.dropout(x, 0.5, training=True) for _ in range(2)]
    torch_neuronx.set_rng_source("cpu")
    for placements in ([Replicate()], [Shard(1)]):
        torch.manual_seed(SEED)
        sharded = dtensor.distribute_tensor(x, tp, placements)
        got = [F.dropout(sharded, 0.5, training=True).full_tensor() for _ in range(2)]
        what = f"dropout on {placements} under the cpu source"
        assert not torch.equal(got[0].cpu(), got[1].cpu()), f"{what}: a repeated mask"
        for i, (mask, want) in enumerate(zip(got, expected)):
            _same(mask, want, f"{what}, draw {i + 1}")


def layouts():
    rank, world, dev = _init(bind_device=True)
    assert world == 4, world
    layouts_, two_d = _layouts(world)
    _init_ops(dev, layouts_)
    _model_init(dev, two_d)
    _dropout(dev, two_d["tp"])
    _dropout_on_the_cpu_source(dev, two_d["tp"])
    print(f"rank {rank}: DTensor random ops equal the unsharded draws", flush=True)

