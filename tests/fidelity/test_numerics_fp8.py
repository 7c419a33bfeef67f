"""FP8 on ``neuron`` as each instance runs it: ``torch._scaled_mm`` with tensor-wise, row-wise and
MX block scales; torchao's float8 training and weight-only inference; the formats an instance
refuses, with the compiler's message; FP8 matmuls projected at the FP8 rate.

Sources: Neuron docs "Data Types" (NeuronCore-v2/v3 cFP8), compiler error code NCC_EVRF051 and
https://github.com/aws-neuron/aws-neuron-sdk/issues/1393 (F8E4M3FN refused on TRN1/TRN2, even as storage), TorchAO Neuron in
Neuron 2.34 (MXFP8 through ``aten::_scaled_mm`` on Trn3)."""
import copy

import pytest
import torch
import torch.nn.functional as F

from precision_env import instance, precision_env
from torch_neuronx import projection as P
from torch_neuronx.numerics import fp8_linear

E4M3, E5M2, E8M0 = torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e8m0fnu
EVRF051 = ("Compilation error occurred on Neuron for operation=aten::_to_copy; error message=\"COMPILATION "
           "FAILED: [NCC_EVRF051] Data type F8E4M3FN is not supported on TRN1/TRN2. Target TRN3 or later hardware\"")


def operands(dtype, m=16, k=64, n=24):
    """(M, K) and (K, N) FP8 operands, the second column-major as ``_scaled_mm`` takes it."""
    return torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype).t()


def on_device(*tensors):
    return [t.to("neuron") for t in tensors]


def test_trn2_takes_e5m2_and_refuses_e4m3fn_with_the_compilers_message():
    x = torch.randn(4, 4, device="neuron")
    assert x.to(E5M2).cpu().equal(x.cpu().to(E5M2))
    with pytest.raises(RuntimeError) as err:
        x.to(E4M3)
    assert str(err.value).startswith(EVRF051) and "\n" not in str(err.value)
    stored = torch.randn(4, 4).to(E4M3).to("neuron")  # a host-device copy moves bytes: no kernel
    with pytest.raises(RuntimeError, match=r"operation=aten::_to_copy; .*NCC_EVRF051"):
        stored.float()  # the first kernel to touch it fails
    with pytest.raises(RuntimeError, match="float8_e4m3fnuz is not a format any NeuronCore takes"):
        x.to(torch.float8_e4m3fnuz)
    with precision_env(NEURON_CC_FLAGS="--experimental-unsafe-fp8e4m3fn-as-fp8e4m3"):
        assert x.to(E4M3).cpu().equal(x.cpu().to(E4M3))


@pytest.mark.parametrize("name, dtype", [("trn2.3xlarge", E5M2), ("trn3", E4M3)])
def test_scaled_mm_tensor_and_row_wise_equal_cpu(name, dtype):
    a, b = operands(dtype)
    scales = [(torch.tensor(0.5), torch.tensor(2.0)), (torch.rand(16, 1) + 0.5, torch.rand(1, 24) + 0.5)]
    with instance(name):
        for sa, sb in scales:
            bias = torch.randn(24, dtype=torch.bfloat16)
            cpu = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, bias=bias, out_dtype=torch.bfloat16)
            dev = torch._scaled_mm(*on_device(a, b), scale_a=sa.to("neuron"), scale_b=sb.to("neuron"),
                                   bias=bias.to("neuron"), out_dtype=torch.bfloat16)
            assert dev.device.type == "neuron" and torch.equal(dev.cpu(), cpu)


def test_scaled_mm_writes_its_result_as_the_device_rounds():
    """FP32 accumulation written as bf16: to nearest by default (CPU's result), each value one of
    the two bf16 neighbours of the FP32 result under stochastic rounding."""
    from torch_neuronx.numerics import stochastic_rounding

    a, b = on_device(*operands(E5M2))
    one = torch.tensor(1.0, device="neuron")
    wide = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.float32).cpu()
    with stochastic_rounding(True, 2):
        narrow = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16).float().cpu()
    ulp = torch.exp2(torch.floor(torch.log2(wide.abs().clamp_min(2**-100))) - 7)
    assert bool(((narrow - wide).abs() < ulp).all()) and not torch.equal(narrow, wide.bfloat16().float())


def mx_scales(m, k, n):
    """Powers of two from 2^-3 to 2^3 as e8m0 bytes: (M, K/32) and (N, K/32), unswizzled."""
    return [torch.randint(124, 131, (rows, k // 32), dtype=torch.uint8).view(E8M0) for rows in (m, n)]


def test_mx_block_scaled_matmul_runs_on_trn3_only():
    a, b = operands(E4M3)
    sa, sb = mx_scales(16, 64, 24)
    expected = ((a.float() * sa.float().repeat_interleave(32, 1))
                @ (b.float() * sb.float().repeat_interleave(32, 1).t())).bfloat16()
    with instance("trn3"):
        v1 = torch._scaled_mm(*on_device(a, b), scale_a=sa.to("neuron"), scale_b=sb.to("neuron"),
                              out_dtype=torch.bfloat16)
        v2 = F.scaled_mm(*on_device(a, b), sa.to("neuron"), F.ScalingType.BlockWise1x32, sb.to("neuron"),
                         F.ScalingType.BlockWise1x32, swizzle_a=F.SwizzleType.NO_SWIZZLE,
                         swizzle_b=F.SwizzleType.NO_SWIZZLE, output_dtype=torch.bfloat16)
        assert torch.equal(v1.cpu(), expected) and torch.equal(v2.cpu(), expected)
    a5, b5 = operands(E5M2)
    with pytest.raises(RuntimeError, match=r"^aten::_scaled_mm: MX block-scaled FP8 matmuls run on NeuronCore-v4 "
                                           r"\(trn3\) only; the emulated trn2.3xlarge has NeuronCore-v3"):
        torch._scaled_mm(*on_device(a5, b5), scale_a=sa.to("neuron"), scale_b=sb.to("neuron"),
                         out_dtype=torch.bfloat16)


def test_fp8_linear_is_the_scaled_matmul_of_its_quantized_operands():
    linear = torch.nn.Linear(32, 16).bfloat16()
    x = torch.randn(4, 8, 32, dtype=torch.bfloat16)
    with instance("trn3"):
        assert fp8_linear.formats() == (E4M3, E5M2)  # torchao's recipe: e4m3 forward, e5m2 gradients
        got = fp8_linear.Fp8Linear(linear.to("neuron"), E4M3, E5M2)(x.to("neuron")).cpu()
    assert fp8_linear.formats() == (E5M2, E5M2)  # trn2 refuses e4m3fn
    linear = linear.cpu()
    flat, weight = x.reshape(-1, 32), linear.weight
    x_scale = (448 / flat.float().abs().amax()).bfloat16()  # the scale in the activations' dtype
    w_scale = (448 / weight.float().abs().amax()).bfloat16()
    expected = torch._scaled_mm((flat * x_scale).to(E4M3), (weight * w_scale).to(E4M3).t(),
                                scale_a=x_scale.float().reciprocal(), scale_b=w_scale.float().reciprocal(),
                                out_dtype=torch.bfloat16)
    assert torch.equal(got, (expected + linear.bias).reshape(4, 8, 16))


@pytest.mark.parametrize("name", ["trn2.3xlarge", "trn3"])
def test_an_fp8_training_step_equals_cpu(name):
    """Forward and both backward matmuls in FP8 (no torchao needed): the device's step is CPU's,
    and its gradients stay near the bf16 ones."""
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).bfloat16()
    x = torch.randn(8, 32, dtype=torch.bfloat16)
    reference = copy.deepcopy(model)
    with instance(name):
        formats = fp8_linear.formats()
        loss, params = _train_step(fp8_linear.with_fp8_matmuls(copy.deepcopy(model).to("neuron")), x.to("neuron"))
    cpu_loss, cpu_params = _train_step(fp8_linear.with_fp8_matmuls(model, *formats), x)
    assert torch.equal(loss, cpu_loss) and all(torch.equal(p, q) for p, q in zip(params, cpu_params))
    _, bf16_params = _train_step(reference, x)
    assert all((p.float() - q.float()).abs().max() < 0.05 for p, q in zip(params, bf16_params))


def test_fp8_matmul_is_projected_at_the_fp8_rate():
    """Trn2's TensorE runs FP8 at twice its BF16 rate (double-row FP8); row-wise FP32 scales,
    2-D as they are, do not set the rate."""
    projector = P.Projector("trn2.3xlarge", lnc=2, calibration=P.defaults())
    m = k = n = 2048
    fp8 = projector.add_signature("aten::_scaled_mm", "fp8", (
        torch.empty(m, k, dtype=E5M2, device="meta"), torch.empty(n, k, dtype=E5M2, device="meta").t(),
        torch.empty(m, 1, device="meta"), torch.empty(1, n, device="meta"), None, None, torch.bfloat16, False))
    bf16 = projector.add_signature("aten::mm", "bf16", (torch.empty(m, k, dtype=torch.bfloat16, device="meta"),
                                                        torch.empty(k, n, dtype=torch.bfloat16, device="meta")))
    assert fp8.engine == "tensor" and fp8.flops == bf16.flops == 2 * m * k * n
    assert bf16.compute_seconds / fp8.compute_seconds == pytest.approx(2.0)


def _train_step(model, x):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    return loss.detach().cpu(), [p.detach().cpu() for p in model.parameters()]


def test_torchao_float8_training_step_equals_cpu_on_trn3_and_is_refused_on_trn2():
    pytest.importorskip("torchao", reason="torchao (the `fp8` extra) is not installed")
    from torchao.float8 import convert_to_float8_training

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    convert_to_float8_training(model)  # e4m3 inputs and weights, e5m2 gradients, tensor-wise scales
    x = torch.randn(8, 32)
    device_model = copy.deepcopy(model).to("neuron")
    with pytest.raises(RuntimeError, match="NCC_EVRF051"):
        _train_step(copy.deepcopy(device_model), x.to("neuron"))
    with instance("trn3"):
        loss, params = _train_step(device_model, x.to("neuron"))
    cpu_loss, cpu_params = _train_step(model, x)
    assert torch.equal(loss, cpu_loss)
    assert all(torch.equal(p, q) for p, q in zip(params, cpu_params))


def test_torchao_float8_weight_only_inference_equals_cpu_on_trn3():
    pytest.importorskip("torchao", reason="torchao (the `fp8` extra) is not installed")
    from torchao.quantization import Float8WeightOnlyConfig, quantize_

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16)).bfloat16()
    x = torch.randn(8, 32, dtype=torch.bfloat16)
    with instance("trn3"):
        device_model = copy.deepcopy(model).to("neuron")
        quantize_(device_model, Float8WeightOnlyConfig())
        got = device_model(x.to("neuron")).cpu()
    quantize_(model, Float8WeightOnlyConfig())
    assert torch.equal(got, model(x))


def test_a_traced_fp8_linear_is_one_tensor_engine_kernel_at_the_fp8_rate():
    """What a plan traces (fake tensors, ``ProjectionMode``): ``_scaled_mm`` is a kernel of the eager
    device with the matmul's FLOPs at twice the bf16 rate on Trn2, beside its scaling passes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    projector = P.Projector("trn2.3xlarge", 2, P.defaults())
    with FakeTensorMode(), torch.device("neuron"):
        linear = torch.nn.Linear(1024, 1024, bias=False, dtype=torch.bfloat16)
        x = torch.zeros(1024, 1024, dtype=torch.bfloat16)
        with P.ProjectionMode(projector) as bf16:
            linear(x)
        with P.ProjectionMode(projector) as fp8:
            fp8_linear.Fp8Linear(linear, E5M2, E5M2)(x)
    tensor = {name: [projector.kernels[k] for k in mode.calls if projector.kernels[k].engine == "tensor"]
              for name, mode in (("bf16", bf16), ("fp8", fp8))}
    assert [c.op for c in tensor["fp8"]] == ["aten::_scaled_mm"] and [c.op for c in tensor["bf16"]] == ["aten::mm"]
    assert tensor["fp8"][0].flops == tensor["bf16"][0].flops == 2 * 1024**3
    assert tensor["bf16"][0].compute_seconds / tensor["fp8"][0].compute_seconds == pytest.approx(2.0)


def test_a_plan_with_fp8_precision_runs_its_linear_matmuls_at_the_fp8_rate(tmp_path):
    """``torchneuron plan --precision fp8``: bf16 parameters, every ``nn.Linear``'s matmuls in FP8
    (``numerics/fp8_linear.py``): the bf16 plan's FLOPs and parameter bytes, less TensorE time (a
    tiny model's matmuls fill few TensorE tiles, so the bound is the bf16 plan, not FLOPs/peak)."""
    from torch_neuronx.plan.planner import Planner
    from torch_neuronx.plan.request import Layout
    from torch_neuronx.testing.tiny_models import tiny_config

    tiny_config("llama").save_pretrained(tmp_path)
    plans = {p: Planner(str(tmp_path), "trn2.3xlarge", 64, dtype=p).plan(Layout(1, 1, 1, False, 2, 1)).to_dict()
             for p in ("bf16", "fp8")}
    assert plans["fp8"]["precision"] == "fp8"
    for graph in ("forward", "backward"):
        bf16, fp8 = (plans[p]["time"]["graphs"][graph] for p in ("bf16", "fp8"))
        assert fp8["flops"] == bf16["flops"] > 0
        assert 0 < fp8["tensor_seconds_at_peak"] < bf16["tensor_seconds_at_peak"]
    assert plans["fp8"]["memory"]["bytes"]["parameters"] == plans["bf16"]["memory"]["bytes"]["parameters"]
