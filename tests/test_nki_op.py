"""NKI kernels on `neuron` tensors: direct calls, `torch_neuronx.nki_op` in eager,
inside torch.compile, with autograd, compile accounting, and in a tiny Llama."""
import copy
import math

import pytest
import torch

import nki_kernels as K
import torch_neuronx
from torch_neuronx import nki_op

nki = torch_neuronx.nki
nl, nisa = nki.language, nki.isa

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=3e-2, rtol=2e-2)}


@pytest.fixture(autouse=True)
def _trn2(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


def _dev(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype).to("neuron")


def _close(got, ref, dtype):
    assert got.device.type == "neuron" and got.dtype == dtype
    torch.testing.assert_close(got.cpu().float(), ref.float(), **TOL[dtype])


# -- tutorial kernels on the device ------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tutorial_kernels_match_pytorch_on_device(dtype):
    a, b = _dev(256, 1024, dtype=dtype), _dev(256, 1024, dtype=dtype)
    _close(K.tensor_add(a, b), a.cpu() + b.cpu(), dtype)
    _close(K.spmd_tensor_add[2, 2](a, b), a.cpu() + b.cpu(), dtype)

    lhsT, rhs = _dev(256, 256, dtype=dtype), _dev(256, 1024, dtype=dtype)
    ref = lhsT.cpu().float().T @ rhs.cpu().float()
    got = K.matmul_tiled(lhsT, rhs)
    assert got.dtype == dtype
    torch.testing.assert_close(got.cpu().float(), ref, atol=0.05 * ref.abs().max().item() if dtype != torch.float32
                               else 1e-4, rtol=1e-4)

    x, w = _dev(200, 96, dtype=dtype), torch.rand(96, dtype=dtype).to("neuron")  # 200 rows: a partial tile
    ref = torch.nn.functional.rms_norm(x.cpu().float(), (96,), w.cpu().float(), eps=1e-6)
    _close(K.rmsnorm(x, w), ref, dtype)
    _close(K.rmsnorm_masked(x, w), ref, dtype)
    _close(K.rmsnorm_isa(x, w, 1e-6), ref, dtype)

    x = _dev(256, 300, dtype=dtype)
    _close(K.softmax(x), torch.softmax(x.cpu().float(), dim=-1), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_kernel_matches_sdpa_on_device(dtype):
    q, k, v = (torch.randn(n, 64, dtype=dtype) for n in (256, 384, 384))
    out = K.attention_fwd(q.T.contiguous().to("neuron"), k.T.contiguous().to("neuron"), v.to("neuron"))
    ref = torch.nn.functional.scaled_dot_product_attention(q.float()[None], k.float()[None], v.float()[None])[0]
    _close(out, ref, dtype)
    est = K.attention_fwd.last_estimate
    assert est.instructions["tensor"] == 2 * (1 + 2 * 3)  # per query block: scores, then transpose+PV per key block
    assert est.bound_s > 0 and est.kind == "projection"


def test_direct_call_writes_into_a_neuron_input():
    @nki.jit
    def fill_ones(buf):
        tile = nl.ndarray(buf.shape, dtype=buf.dtype, buffer=nl.sbuf)
        nisa.memset(tile, 1.0)
        nisa.dma_copy(dst=buf, src=tile)
        return buf

    buf = torch.zeros(4, 8, device="neuron")
    out = fill_ones(buf)
    assert out is buf and torch.equal(buf.cpu(), torch.ones(4, 8))


# -- nki_op --------------------------------------------------------------------------------------
@nki_op("nki_test::add", mutates_args=())
@nki.jit
def add_op(a_input: torch.Tensor, b_input: torch.Tensor) -> torch.Tensor:
    c = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    nl.store(c, value=nl.add(nl.load(a_input), nl.load(b_input)))
    return c


@nki_op("nki_test::rmsnorm", mutates_args=())
def rmsnorm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return K.rmsnorm_isa(x, weight, eps)


def _rmsnorm_setup(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _rmsnorm_backward(ctx, grad):
    x, weight = ctx.saved_tensors
    xf, gf = x.float(), grad.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.eps)
    gw = gf * weight.float()
    dx = rstd * gw - xf * rstd.pow(3) * (gw * xf).mean(-1, keepdim=True)
    dweight = (gf * xf * rstd).sum(0)
    return dx.to(x.dtype), dweight.to(weight.dtype), None


rmsnorm_op.register_autograd(_rmsnorm_backward, setup_context=_rmsnorm_setup)


@nki_op("nki_test::scale_", mutates_args=("x",))
@nki.jit
def scale_inplace(x: torch.Tensor, factor: float) -> None:
    tile = nl.load(x)
    nl.store(x, value=nl.multiply(tile, factor))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nki_op_runs_on_neuron_tensors_in_eager(dtype):
    a, b = _dev(128, 64, dtype=dtype), _dev(128, 64, dtype=dtype)
    _close(add_op(a, b), a.cpu() + b.cpu(), dtype)
    _close(torch.ops.nki_test.add(a, b), a.cpu() + b.cpu(), dtype)
    x = _dev(8, 16, dtype=dtype)
    before = x.cpu()
    assert scale_inplace(x, 3.0) is None
    _close(x, before.float() * 3, dtype)


def test_nki_op_compiles_once_per_signature():
    torch_neuronx.reset_metrics()
    a, b = _dev(112, 40), _dev(112, 40)  # shapes no other test uses: every signature is new here
    for _ in range(3):
        add_op(a, b)
    add_op(_dev(48, 40), _dev(48, 40))
    add_op(a.bfloat16(), b.bfloat16())
    x, w = _dev(24, 40), _dev(40)
    rmsnorm_op(x, w, 1e-6)
    rmsnorm_op(x, w, 1e-6)
    rmsnorm_op(x, w, 1e-5)  # a non-tensor argument is part of the signature
    per_op = torch_neuronx.metrics()["kernels"]["per_op"]
    assert per_op["nki_test::add"] == {"calls": 5, "signatures": 3, "misses": 3}
    assert per_op["nki_test::rmsnorm"] == {"calls": 3, "signatures": 2, "misses": 2}


def test_nki_op_inside_torch_compile_matches_eager():
    x, w = _dev(64, 32), _dev(32)

    def f(x, w):
        return rmsnorm_op(x * 2, w, 1e-6) + add_op(x, x)

    compiled = torch.compile(f, backend="neuron", fullgraph=True)
    torch.testing.assert_close(compiled(x, w).cpu(), f(x, w).cpu())


def test_nki_op_autograd_matches_pytorch_rmsnorm():
    x_ref, w_ref = torch.randn(40, 32, requires_grad=True), torch.rand(32, requires_grad=True)
    x = x_ref.detach().to("neuron").requires_grad_()
    w = w_ref.detach().to("neuron").requires_grad_()
    grad = torch.randn(40, 32)
    rmsnorm_op(x, w, 1e-6).backward(grad.to("neuron"))
    torch.nn.functional.rms_norm(x_ref, (32,), w_ref, eps=1e-6).backward(grad)
    torch.testing.assert_close(x.grad.cpu(), x_ref.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.grad.cpu(), w_ref.grad, atol=1e-5, rtol=1e-5)


def test_nki_op_without_type_hints_gets_pytorchs_schema_error():
    with pytest.raises(ValueError, match="type annotation"):
        @nki_op("nki_test::untyped", mutates_args=())
        @nki.jit
        def untyped(x):
            return x


# -- a kernel inside a model that trains ------------------------------------------------------------
def _train_tiny_llama(use_nki: bool, monkeypatch) -> list[float]:
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama import modeling_llama

    if use_nki:
        def forward(self, hidden_states):
            flat = hidden_states.reshape(-1, hidden_states.shape[-1])
            return rmsnorm_op(flat, self.weight, self.variance_epsilon).reshape(hidden_states.shape)

        monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", forward)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to("neuron")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1)).to("neuron")
    losses = []
    for _ in range(4):
        loss = model(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    monkeypatch.undo()
    return losses


def test_tiny_llama_with_nki_rmsnorm_trains_like_pytorch(monkeypatch):
    reference = _train_tiny_llama(False, monkeypatch)
    torch_neuronx.reset_metrics()
    with_kernel = _train_tiny_llama(True, monkeypatch)
    # 2 layers x 2 norms + the final norm, 4 steps
    assert torch_neuronx.metrics()["kernels"]["per_op"]["nki_test::rmsnorm"]["calls"] == 5 * 4
    assert reference[-1] < reference[0] - 0.1  # it does train
    assert with_kernel == pytest.approx(reference, rel=1e-5)
