"""What each spawned rank runs. Every scenario checks the neuron group against
the same computation on CPU tensors through a plain gloo group (the real
product's validation recipe) and raises on the first mismatch."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def _init(backend: str | None = "neuron", timeout_s: float = 180, bind_device: bool = False):
    import datetime

    dev = torch.device("neuron", int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s),
                            device_id=dev if bind_device else None)
    return dist.get_rank(), dist.get_world_size(), dev


def _raises(exc_type, message, call):
    """``call()`` must raise ``exc_type`` with ``message`` in its text."""
    try:
        call()
    except exc_type as exc:
        assert message in str(exc), f"{exc_type.__name__} without {message!r}: {exc}"
    else:
        raise AssertionError(f"no {exc_type.__name__} ({message!r})")


def _same(a: torch.Tensor, b: torch.Tensor, what: str, exact: bool = True, rtol=1e-5, atol=1e-6):
    a = a.detach().cpu()
    b = b.detach().cpu()
    if exact:
        ok = a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    else:
        ok = a.shape == b.shape and torch.allclose(a.float(), b.float(), rtol=rtol, atol=atol)
    if not ok:
        raise AssertionError(f"rank {dist.get_rank()}: {what}: neuron {a} != reference {b}")


def collectives():
    # One logical core per rank, index LOCAL_RANK, and no device use before init.
    local_rank = int(os.environ["LOCAL_RANK"])
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == str(local_rank)
    assert torch.neuron.device_count() == int(os.environ["LOCAL_WORLD_SIZE"])
    assert torch.neuron.current_device() == local_rank
    try:
        torch.ones(1, device="neuron")
    except RuntimeError as exc:
        assert "init_process_group" in str(exc) and f"neuron:{local_rank}" in str(exc), exc
    else:
        raise AssertionError("touching the device before init_process_group did not fail")
    # no backend named: the device->backend map picks neuron
    rank, world, dev = _init(backend=None)
    assert dist.distributed_c10d._get_default_group().name() == "neuron"
    gloo = dist.new_group(backend="gloo")
    R = dist.ReduceOp

    def data(shape=(3, 4), dtype=torch.float32, seed=0):
        g = torch.Generator().manual_seed(seed * 100 + rank)
        return (torch.randn(shape, generator=g) * 4).to(dtype)

    # all_reduce, every op
    for op, dtype in [(R.SUM, torch.float32), (R.PRODUCT, torch.float32), (R.MIN, torch.float32),
                      (R.MAX, torch.bfloat16), (R.BAND, torch.int32), (R.BOR, torch.int32),
                      (R.BXOR, torch.int32), (R.SUM, torch.int32)]:
        x = data(dtype=dtype)
        n, c = x.to(dev), x.clone()
        dist.all_reduce(n, op)
        dist.all_reduce(c, op, group=gloo)
        assert n.device == dev
        _same(n, c, f"all_reduce {op}")
    x = data()
    n = x.to(dev)
    dist.all_reduce(n, R.AVG)
    c = x.clone()
    dist.all_reduce(c, group=gloo)
    _same(n, c / world, "all_reduce AVG", exact=False)
    n = x.to(dev)
    dist.all_reduce(n, dist._make_nccl_premul_sum(0.25))
    c = x * 0.25
    dist.all_reduce(c, group=gloo)
    _same(n, c, "all_reduce PREMUL_SUM", exact=False)

    # async handles
    n = x.to(dev)
    work = dist.all_reduce(n, async_op=True)
    assert work.wait() and work.is_completed()
    fut_value = work.get_future().value()
    assert fut_value[0] is n or torch.equal(fut_value[0].cpu(), n.cpu())
    c = x.clone()
    dist.all_reduce(c, group=gloo)
    _same(n, c, "async all_reduce")

    # all_gather / all_gather_into_tensor (+coalesced) / reduce_scatter(_tensor)
    x = data((2, 3), seed=1)
    outs = [torch.empty(2, 3, device=dev) for _ in range(world)]
    dist.all_gather(outs, x.to(dev))
    ref = [torch.empty(2, 3) for _ in range(world)]
    dist.all_gather(ref, x, group=gloo)
    for o, r in zip(outs, ref):
        _same(o, r, "all_gather")
    big = torch.empty(2 * world, 3, device=dev)
    dist.all_gather_into_tensor(big, x.to(dev))
    _same(big, torch.cat(ref), "all_gather_into_tensor")
    with dist._coalescing_manager(async_ops=True) as cm:
        b1 = torch.empty(2 * world, 3, device=dev)
        b2 = torch.empty(world, 5, device=dev, dtype=torch.bfloat16)
        dist.all_gather_into_tensor(b1, x.to(dev))
        dist.all_gather_into_tensor(b2, torch.full((1, 5), float(rank), dtype=torch.bfloat16, device=dev))
    cm.wait()
    _same(b1, torch.cat(ref), "coalesced all_gather_into_tensor")
    _same(b2, torch.arange(world, dtype=torch.bfloat16)[:, None].expand(world, 5), "coalesced ag 2")

    x = data((world * 2, 3), seed=2)
    for op in (R.SUM, R.AVG, R.MAX):
        gloo_op = R.SUM if op == R.AVG else op
        scale = 1 / world if op == R.AVG else 1.0
        out = torch.empty(2, 3, device=dev)
        dist.reduce_scatter_tensor(out, x.to(dev), op)
        ref = torch.empty(2, 3)
        dist.reduce_scatter_tensor(ref, x.clone(), gloo_op, group=gloo)
        _same(out, ref * scale, f"reduce_scatter_tensor {op}", exact=op != R.AVG)
        outl = torch.empty(2, 3, device=dev)
        dist.reduce_scatter(outl, list(x.to(dev).chunk(world)), op)
        refl = torch.empty(2, 3)
        dist.reduce_scatter(refl, list(x.clone().chunk(world)), gloo_op, group=gloo)
        _same(outl, refl * scale, f"reduce_scatter {op}", exact=op != R.AVG)
    with dist._coalescing_manager(async_ops=True) as cm:
        o1 = torch.empty(2, 3, device=dev)
        dist.reduce_scatter_tensor(o1, x.to(dev), R.AVG)
    cm.wait()
    ref = torch.empty(2, 3)
    dist.reduce_scatter_tensor(ref, x.clone(), group=gloo)
    _same(o1, ref / world, "coalesced reduce_scatter_tensor", exact=False)

    # broadcast, reduce, gather, scatter
    x = data((4,), seed=3)
    n, c = x.to(dev), x.clone()
    dist.broadcast(n, src=world - 1)
    dist.broadcast(c, src=world - 1, group=gloo)
    _same(n, c, "broadcast")
    for op in (R.SUM, R.AVG):
        n, c = x.to(dev), x.clone()
        dist.reduce(n, dst=0, op=op)
        dist.reduce(c, dst=0, group=gloo)
        if rank == 0:
            _same(n, c / world if op == R.AVG else c, f"reduce {op}", exact=False)
    gl = [torch.empty(4, device=dev) for _ in range(world)] if rank == 0 else None
    dist.gather(x.to(dev), gl, dst=0)
    gr = [torch.empty(4) for _ in range(world)] if rank == 0 else None
    dist.gather(x, gr, dst=0, group=gloo)
    if rank == 0:
        for a, b in zip(gl, gr):
            _same(a, b, "gather")
    src_list = [torch.full((3,), float(i + 10)) for i in range(world)]
    n = torch.empty(3, device=dev)
    dist.scatter(n, [t.to(dev) for t in src_list] if rank == 0 else None, src=0)
    _same(n, src_list[rank], "scatter")

    # all_to_all_single, even and uneven; list all_to_all
    inp = torch.arange(world * 2, dtype=torch.float32) + 100 * rank
    out = torch.empty(world * 2, device=dev)
    dist.all_to_all_single(out, inp.to(dev))
    ref = torch.empty(world * 2)
    dist.all_to_all_single(ref, inp.clone(), group=gloo)
    _same(out, ref, "all_to_all_single")
    ones = [1] * world  # the only explicit splits the real backend accepts
    inp = torch.randn(world, 2)
    out = torch.empty(world, 2, device=dev)
    dist.all_to_all_single(out, inp.to(dev), ones, ones)
    ref = torch.empty(world, 2)
    dist.all_to_all_single(ref, inp, ones, ones, group=gloo)
    _same(out, ref, "all-1 all_to_all_single")
    in_splits = [(rank + d) % 3 + 1 for d in range(world)]           # what I send to d
    out_splits = [(s + rank) % 3 + 1 for s in range(world)]          # what s sends me
    inp = torch.randn(sum(in_splits), 2)
    out = torch.empty(sum(out_splits), 2, device=dev)
    # Uneven splits: the real product's error (TR distributed/backend.py:1378-1446) unless the switch allows them.
    _raises(NotImplementedError, "alltoall_base: Only even split sizes are supported. Got output_split_sizes",
            lambda: dist.all_to_all_single(out, inp.to(dev), out_splits, in_splits))
    os.environ["TORCHNEURON_ALLOW_UNSUPPORTED_COLLECTIVES"] = "1"
    dist.all_to_all_single(out, inp.to(dev), out_splits, in_splits)
    del os.environ["TORCHNEURON_ALLOW_UNSUPPORTED_COLLECTIVES"]
    ref = torch.empty(sum(out_splits), 2)
    dist.all_to_all_single(ref, inp, out_splits, in_splits, group=gloo)
    _same(out, ref, "uneven all_to_all_single")
    ins = [torch.full((d + 1,), float(rank * 10 + d), device=dev) for d in range(world)]
    outs = [torch.empty(rank + 1, device=dev) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for s, o in enumerate(outs):
        _same(o, torch.full((rank + 1,), float(s * 10 + rank)), "all_to_all list")

    # send/recv ring with isend/irecv (both directions posted before waiting)
    payload = torch.full((5,), float(rank), device=dev)
    got = torch.empty(5, device=dev)
    ops = [dist.P2POp(dist.isend, payload, (rank + 1) % world),
           dist.P2POp(dist.irecv, got, (rank - 1) % world)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    _same(got, torch.full((5,), float((rank - 1) % world)), "isend/irecv ring")
    if rank == 0:
        dist.send(torch.arange(4, device=dev, dtype=torch.float32), dst=1)
    elif rank == 1:
        t = torch.empty(4, device=dev)
        dist.recv(t, src=0)
        _same(t, torch.arange(4, dtype=torch.float32), "send/recv")

    # functional collectives (what DTensor and torch.compile call), vs gloo
    import torch.distributed._functional_collectives as funcol

    x = data((world * 2, 3), seed=4)
    for fn, args in [(funcol.all_reduce, ("sum",)), (funcol.all_gather_tensor, (0,)),
                     (funcol.reduce_scatter_tensor, ("sum", 0))]:
        n = fn(x.to(dev), *args, group=dist.group.WORLD).wait()
        c = fn(x.clone(), *args, group=gloo).wait()
        assert n.device == dev
        _same(n, c, f"functional {fn.__name__}")
    n = funcol.all_to_all_single(x.to(dev), None, None, group=dist.group.WORLD).wait()
    c = funcol.all_to_all_single(x.clone(), None, None, group=gloo).wait()
    _same(n, c, "functional all_to_all_single")

    # object collectives, barrier, subgroup
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(world)], objs
    dist.barrier()
    _raises(ValueError, "monitored_barrier is only implemented for GLOO backend", dist.monitored_barrier)
    sub = dist.new_group([0, 1])
    if rank < 2:
        n = torch.ones(2, device=dev) * (rank + 1)
        dist.all_reduce(n, group=sub)
        _same(n, torch.full((2,), 3.0), "subgroup all_reduce")
        # barrier on a subgroup: the real product's error unless the switch allows it
        _raises(NotImplementedError, "Barrier is implemented only for default group",
                lambda: dist.barrier(group=sub))
        os.environ["TORCHNEURON_ALLOW_UNSUPPORTED_COLLECTIVES"] = "1"
        dist.barrier(group=sub)
        del os.environ["TORCHNEURON_ALLOW_UNSUPPORTED_COLLECTIVES"]
    dist.destroy_process_group()


# --------------------------------------------------------------------------
# training jobs: the same model and data on neuron (neuron group) and on CPU
# (gloo group); per-rank losses, gradients and updated parameters must match.

def _mlp(seed: int = 0, width: int = 16, depth: int = 3) -> torch.nn.Module:
    torch.manual_seed(seed)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 4))


def _compare_models(neuron_model, cpu_model, what: str, grads: bool = True, tol=1e-5):
    from torch.distributed.tensor import DTensor

    def local(t):
        return t.to_local() if isinstance(t, DTensor) else t

    for (name, pn), (_, pc) in zip(neuron_model.named_parameters(), cpu_model.named_parameters()):
        assert pn.device.type == "neuron", (name, pn.device)
        if isinstance(pn, DTensor):
            assert pn.device_mesh.device_type == "neuron", name
        _same(local(pn), local(pc), f"{what}: param {name}", exact=tol == 0)
        if grads:
            assert pn.grad is not None and pc.grad is not None, name
            _same(local(pn.grad), local(pc.grad), f"{what}: grad {name}", exact=tol == 0)


def _train(model, batches, device, steps_out: list, loss_fn=None, lr=0.1):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        out = model(x.to(device))
        loss = (loss_fn or torch.nn.functional.mse_loss)(out.float(), y.to(device))
        loss.backward()
        steps_out.append(loss.detach().cpu())
        if len(steps_out) < len(batches):
            opt.step()
    return model


def _batches(rank: int, n: int = 3, width: int = 16, rows: int = 8):
    g = torch.Generator().manual_seed(1234 + rank)
    return [(torch.randn(rows, width, generator=g), torch.randn(rows, 4, generator=g))
            for _ in range(n)]


def _compare_losses(a: list, b: list, what: str, tol: float = 1e-5):
    for i, (x, y) in enumerate(zip(a, b)):
        _same(x, y, f"{what}: loss at step {i}", exact=tol == 0)


def training():
    from accelerate import PartialState

    # Accelerate initialises the process group before it touches the device.
    state = PartialState()
    assert state.backend == "neuron" and state.device == torch.device("neuron", state.local_process_index)
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = state.device
    gloo = dist.new_group(backend="gloo")
    batches = _batches(rank)

    ddp_checks(dev, gloo, batches)
    fsdp_checks(dev, gloo, batches)
    tp_checks(dev, gloo, rank, world)
    dist.destroy_process_group()


def ddp_checks(dev, gloo, batches):
    from torch.nn.parallel import DistributedDataParallel as DDP

    ln, lc = [], []
    n = _train(DDP(_mlp().to(dev)), batches, dev, ln)
    c = _train(DDP(_mlp(), process_group=gloo), batches, "cpu", lc)
    _compare_losses(ln, lc, "DDP")
    _compare_models(n.module, c.module, "DDP")
    # gradients really were averaged: identical on every rank
    grads = [p.grad.cpu() for p in n.parameters()]
    ref = [g.clone() for g in grads]
    for g in ref:
        dist.broadcast(g, src=0, group=gloo)
    for g, r in zip(grads, ref):
        _same(g, r, "DDP grads equal across ranks")


def _fsdp_model(device, mesh, mp):
    from torch.distributed.fsdp import fully_shard
    from torch.utils.checkpoint import checkpoint

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.blocks = torch.nn.ModuleList(
                [torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.GELU(),
                                     torch.nn.Linear(24, 16)) for _ in range(3)])
            self.head = torch.nn.Linear(16, 4)

        def forward(self, x):
            for i, b in enumerate(self.blocks):
                # activation checkpointing on the middle block
                x = checkpoint(b, x, use_reentrant=False) if i == 1 else b(x)
            return self.head(x)

    net = Net().to(device)
    for i, b in enumerate(net.blocks):
        fully_shard(b, mesh=mesh, mp_policy=mp, reshard_after_forward=i != 2)
    fully_shard(net, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    return net


def fsdp_checks(dev, gloo, batches):
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy

    mesh_n = init_device_mesh("neuron", (dist.get_world_size(),))
    mesh_c = DeviceMesh.from_group(gloo, "cpu")
    for mp, tol in [(MixedPrecisionPolicy(), 1e-5),
                    (MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                          reduce_dtype=torch.float32), 1e-2)]:
        ln, lc = [], []
        n = _train(_fsdp_model(dev, mesh_n, mp), batches, dev, ln)
        c = _train(_fsdp_model("cpu", mesh_c, mp), batches, "cpu", lc)
        _compare_losses(ln, lc, f"FSDP2 {mp}", tol)
        _compare_models(n, c, f"FSDP2 {mp}", tol=tol)
        # reshard after forward freed the unsharded storage (FSDP2 resizes it to 0)
        group = n.blocks[0]._get_fsdp_state()._fsdp_param_group
        for fp in group.fsdp_params:
            for out in fp.all_gather_outputs:
                assert out.device.type == "neuron"
                assert out.untyped_storage().size() == 0, "FSDP2 did not free the unsharded param"
        dist.barrier()


def tp_checks(dev, gloo, rank, world):
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module)

    mesh_n = init_device_mesh("neuron", (world,))
    mesh_c = DeviceMesh.from_group(gloo, "cpu")

    # DTensor: distribute, matmul, redistribute
    torch.manual_seed(5)
    a, b = torch.randn(4 * world, 6), torch.randn(6, 5)
    da = distribute_tensor(a.to(dev), mesh_n, [Shard(0)])
    db = distribute_tensor(b.to(dev), mesh_n, [Replicate()])
    _same((da @ db).full_tensor(), a @ b, "DTensor matmul", exact=False)
    _same(da.redistribute(mesh_n, [Replicate()]).to_local(), a, "redistribute")
    _same(da.redistribute(mesh_n, [Shard(1)]).to_local(), a.chunk(world, 1)[rank], "Shard(0)->Shard(1)")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(3)
            self.norm = torch.nn.LayerNorm(16)
            self.up = torch.nn.Linear(16, 32)
            self.down = torch.nn.Linear(32, 16)

        def forward(self, x):
            return self.down(torch.relu(self.up(self.norm(x))))

    plan_tp = {"up": ColwiseParallel(), "down": RowwiseParallel()}
    plan_sp = {"norm": SequenceParallel(),
               "up": ColwiseParallel(input_layouts=Shard(1)),
               "down": RowwiseParallel(output_layouts=Shard(1))}
    g = torch.Generator().manual_seed(77)
    x = torch.randn(2, 4 * world, 16, generator=g)
    for name, plan in [("TP", plan_tp), ("SP", plan_sp)]:
        inp = x.chunk(world, 1)[rank] if name == "SP" else x
        losses, models = {}, {}
        for device, mesh in [(dev, mesh_n), ("cpu", mesh_c)]:
            m = parallelize_module(Block().to(device), mesh, plan)
            opt = torch.optim.SGD(m.parameters(), lr=0.05, foreach=False)
            ls = []
            for _ in range(2):
                opt.zero_grad()
                loss = m(inp.to(device)).pow(2).mean()
                loss.backward()
                ls.append(loss.detach().cpu())
                opt.step()
            losses[str(device)], models[str(device)] = ls, m
        _compare_losses(losses[str(dev)], losses["cpu"], name)
        _compare_models(models[str(dev)], models["cpu"], name)


# --------------------------------------------------------------------------
# 2-D: tensor parallel inside FSDP on a tiny Llama (the model and plan of
# examples/distributed/train_tp_fsdp.py), then DCP save and reload on a
# different mesh.

def _two_d(ckpt_dir: str, world: int, dev: torch.device):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from train_tp_fsdp import tiny_llama, tp_fsdp  # the example's own model and plan

    mesh_n = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))
    assert mesh_n["tp"].get_group().name() == "neuron"
    g = torch.Generator().manual_seed(mesh_n["dp"].get_local_rank())
    mn = tp_fsdp(tiny_llama(dev), mesh_n)
    opt = torch.optim.AdamW(mn.parameters(), lr=1e-2, foreach=False)
    for _ in range(2):
        ids = torch.randint(0, 96, (2, 12), generator=g).to(dev)
        mn(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    for name, p in mn.named_parameters():
        assert isinstance(p, DTensor) and p.device_mesh.device_type == "neuron", name
        assert p.to_local().device == dev, name

    # The TP×FSDP rule: do not re-apply FSDP to a model that is already sharded.
    from torch.distributed.fsdp import fully_shard
    try:
        fully_shard(mn.model.layers[0].mlp, mesh=mesh_n["dp"])
    except ValueError as exc:
        assert "already sharded" in str(exc) and "dp" in str(exc), exc
    else:
        raise AssertionError("re-applying fully_shard to a sharded module was not detected")

    # DCP: save the 2-D sharded state, reload it into a 1-D FSDP(4) model
    dcp.save(mn.state_dict(), checkpoint_id=ckpt_dir)
    mesh_1d = init_device_mesh("neuron", (world,))
    fresh = tiny_llama(dev)
    torch.manual_seed(99)
    for p in fresh.parameters():
        torch.nn.init.normal_(p)
    for layer in fresh.model.layers:
        fully_shard(layer, mesh=mesh_1d)
    fully_shard(fresh, mesh=mesh_1d)
    try:  # the same mistake on an unnamed 1-D mesh: the layer is sharded already
        fully_shard(fresh.model.layers[1], mesh=mesh_1d)
    except ValueError as exc:
        assert "already sharded on mesh dimension 'dim 0'" in str(exc), exc
    else:
        raise AssertionError("re-sharding on the same 1-D mesh was not detected")
    state = fresh.state_dict()
    dcp.load(state, checkpoint_id=ckpt_dir)
    for (name, pa), (_, pb) in zip(mn.named_parameters(), fresh.named_parameters()):
        _same(pa.full_tensor(), pb.full_tensor(), f"DCP reload {name}")


# --------------------------------------------------------------------------
# faults: one rank raises or dies; the others must stop with an error naming it

def fault(mode: str, timeout_s: str):
    import time

    from torch_neuronx.distributed import DistributedFault

    rank, world, dev = _init(timeout_s=float(timeout_s))
    culprit = world - 1
    x = torch.ones(1024, device=dev)
    dist.all_reduce(x)  # everyone is connected and healthy
    if rank == culprit:
        if mode == "raise":
            raise RuntimeError(f"rank {rank} fails on purpose")
        if mode == "exit":
            os._exit(7)
        time.sleep(float(timeout_s) * 1.5)  # mode "stall": alive but never joins
        os._exit(0)
    start = time.monotonic()
    try:
        for _ in range(10_000):
            dist.all_reduce(x)
    except DistributedFault as exc:
        print(f"FAULT-REPORTED after {time.monotonic() - start:.1f}s: {exc}", flush=True)
        os._exit(0)
    raise AssertionError("the collective loop ended without an error")


# Kept alive until interpreter exit, as a DeviceMesh or an FSDP module would.
_HELD_GROUPS = []


def exit_without_destroy():
    """Collectives on the world and a subgroup, then return with both groups
    still referenced and no destroy_process_group(): the rank must still exit 0."""
    rank, world, dev = _init()
    sub = dist.new_group(list(range(world)))
    _HELD_GROUPS.extend([dist.group.WORLD, sub])
    t = torch.full((1024,), float(rank + 1), device=dev)
    for _ in range(3):
        dist.all_reduce(t, group=sub)
        gathered = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(gathered, t)
    _same(t.cpu(), torch.full((1024,), float(sum(range(1, world + 1)) * world ** 2)), "all_reduce")


def projected_collectives():
    """The neuron group records each collective for the projection (docs/projection.md):
    kind, full-buffer bytes, group size and the link the group spans."""
    from torch_neuronx import projection as P

    rank, world, dev = _init()
    P.reset()
    t = torch.ones(1024, device=dev)
    dist.all_reduce(t)
    shard = torch.empty(1024 // world, device=dev)
    dist.reduce_scatter_tensor(shard, t)
    gathered = torch.empty(1024 * world, device=dev)
    dist.all_gather_into_tensor(gathered, t)
    expected = {P.CollectiveRecord("all_reduce", 4096, world, "chip"): 1,
                P.CollectiveRecord("reduce_scatter", 4096, world, "chip"): 1,  # the input, not the shard
                P.CollectiveRecord("all_gather", 4096 * world, world, "chip"): 1}
    assert dict(P.COLLECTIVE_LOG.counts) == expected, dict(P.COLLECTIVE_LOG.counts)
    summary = P.snapshot()["collectives"]
    device = P.device_model()
    ring = (world - 1) / world
    cal = P.get_projector().calibration  # the calibration in force (the fitted factors unless a file is named)
    bandwidth = device.link_bytes_per_s["chip"] * cal.efficiency["link"]
    seconds = cal.link_latency_seconds["chip"] * (world - 1) * 4 \
        + ring * (2 * 4096 + 4096 + 4096 * world) / bandwidth
    assert abs(summary["seconds"] - seconds) <= 1e-9 * seconds, (summary, seconds)
    dist.destroy_process_group()


# --------------------------------------------------------------------------
# plan: what one training step of a TP × FSDP layout really allocates per rank

PLAN_SIZE = dict(hidden=256, layers=2, heads=4, kv_heads=4, intermediate=512, vocab=512, positions=256)
PLAN_BATCH, PLAN_SEQ = 2, 128  # the step whose per-rank peak test_plan_memory.py compares


def _plan_memory(config_dir: str, batch: str, seq: str, rank: int, dev: torch.device):
    """One AdamW step of the tiny Llama under the example's TP plan (TP=2) and FSDP2 (2),
    printing this rank's peak of allocated device memory for the step."""
    from torch.distributed.device_mesh import init_device_mesh
    from train_tp_fsdp import tp_fsdp

    from torch_neuronx.testing.tiny_models import TinySize, tiny_causal_lm

    model = tiny_causal_lm("llama", TinySize(**PLAN_SIZE), 0, "sdpa", tie_word_embeddings=False)
    if rank == 0:
        model.config.save_pretrained(config_dir)
    mesh = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))
    model = tp_fsdp(model.train().to(dev), mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    ids = torch.randint(0, PLAN_SIZE["vocab"], (int(batch), int(seq))).to(dev)
    for step in range(2):  # the second step is steady state: optimizer state exists
        torch.neuron.synchronize()
        torch.neuron.reset_peak_memory_stats(dev)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.neuron.synchronize()
    print(f"PEAK {torch.neuron.max_memory_allocated(dev)}", flush=True)


def plan_memory_then_two_d(config_dir: str, batch: str, seq: str, ckpt_dir: str):
    """Two checks of a 4-rank TP=2 x FSDP=2 tiny Llama on one job (a rank's start, import torch
    and Transformers, costs seconds): the plan's per-rank peak first, on a device nothing has
    used yet, then 2-D training with device_id= binding, the pre-sharded fully_shard guard and
    DCP save and reload on a 1-D mesh of 4."""
    import gc

    rank, world, dev = _init(bind_device=True)  # device_id=, as TorchTitan passes it
    assert world == 4
    _plan_memory(config_dir, batch, seq, rank, dev)
    gc.collect()
    _two_d(ckpt_dir, world, dev)
    dist.destroy_process_group()
