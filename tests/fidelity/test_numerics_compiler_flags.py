"""The compiler's precision flags in ``NEURON_CC_FLAGS``, honoured by eager kernels and compiled
graphs: the real product compiles both with ``--auto-cast=none`` followed by ``NEURON_CC_FLAGS``
(TR ``csrc/core/KernelExecution.cpp:65-83, 151-169``), a later flag superseding an earlier one
(neuronx-cc CLI reference); defaults since Neuron 2.27: no auto-cast, mixed-precision
accumulation on (compiler release notes 2.27.0)."""
import pytest
import torch

from precision_env import precision_env
from torch_neuronx.numerics import compiler_flags, precision, stochastic_rounding
from torch_neuronx.runtime.errors import ConfigError

parse = compiler_flags.parse


def test_defaults_and_the_spellings_neuronx_cc_takes():
    assert parse("") == compiler_flags.PrecisionFlags("none", "bf16", True, False)
    assert parse("--model-type transformer -O2 --auto-cast matmult").auto_cast == "matmult"
    assert parse("--auto-cast=matmul --auto-cast-type=fp16").auto_cast == "matmult"  # the release notes' spelling
    assert parse("--auto-cast=all --auto-cast-type tf32") == compiler_flags.PrecisionFlags("all", "tf32", True, False)
    assert parse("--auto-cast matmult --auto-cast none").auto_cast == "none"  # the later one wins
    assert not parse("--disable-mixed-precision-accumulation").mixed_precision_accumulation
    assert parse("--disable-mixed-precision-accumulation --enable-mixed-precision-accumulation") \
        .mixed_precision_accumulation
    assert parse("'--experimental-unsafe-fp8e4m3fn-as-fp8e4m3' --lnc 2").fp8e4m3fn_as_fp8e4m3


@pytest.mark.parametrize("value, message", [
    ("--auto-cast fast", "NEURON_CC_FLAGS: --auto-cast value 'fast' is not one of none, matmult, matmul, all"),
    ("--auto-cast-type=int8", "NEURON_CC_FLAGS: --auto-cast-type value 'int8' is not one of bf16, fp16, tf32"),
    ("-O1 --auto-cast", "NEURON_CC_FLAGS: --auto-cast needs a value (none, matmult, matmul, all)"),
    ("--auto-cast 'matmult", "NEURON_CC_FLAGS=\"--auto-cast 'matmult\" is not a valid list of compiler flags"),
])
def test_bad_flags_are_one_line_naming_the_variable(value, message):
    with pytest.raises(ConfigError) as err:
        parse(value)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="^NEURON_CC_FLAGS"):
        with precision_env(NEURON_CC_FLAGS=value):
            pass
    assert precision.flags() == compiler_flags.PrecisionFlags()  # the defaults stay in force


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.bfloat16().float()


def test_auto_cast_matmult_makes_an_fp32_matmul_the_bf16_one():
    """Under ``--auto-cast matmult`` TensorE multiplies the operands cast to bf16 and accumulates in
    FP32: the result is the FP32 product of the bf16-rounded matrices; a bias stays FP32."""
    a, b, bias = torch.randn(64, 128), torch.randn(128, 32), torch.randn(32)
    na, nb, nbias = a.to("neuron"), b.to("neuron"), bias.to("neuron")
    exact = (na @ nb).cpu()
    assert torch.equal(exact, a @ b)
    with precision_env(NEURON_CC_FLAGS="--model-type transformer --auto-cast matmult"):
        cast = (na @ nb).cpu()
        linear = torch.nn.functional.linear(na, nb.t(), nbias).cpu()
        assert torch.equal((na * 3.1).cpu(), a * 3.1)  # not a matmul: untouched
    assert torch.equal(cast, _bf16(a) @ _bf16(b))
    assert not torch.equal(cast, exact)
    assert (cast - (a.bfloat16() @ b.bfloat16()).float()).abs().max() <= exact.abs().max() * 2**-8
    assert torch.equal(linear, torch.nn.functional.linear(_bf16(a), _bf16(b).t(), bias))
    assert torch.equal((na @ nb).cpu(), exact)  # flags back to the default


def test_auto_cast_all_and_the_other_cast_types():
    a, b = torch.randn(256), torch.randn(256)
    with precision_env(NEURON_CC_FLAGS="--auto-cast all"):
        added = (a.to("neuron") + b.to("neuron")).cpu()
    assert torch.equal(added, _bf16(_bf16(a) + _bf16(b)))
    m, n = torch.randn(16, 32), torch.randn(32, 8)
    with precision_env(NEURON_CC_FLAGS="--auto-cast matmult --auto-cast-type fp16"):
        half = (m.to("neuron") @ n.to("neuron")).cpu()
    assert torch.equal(half, m.half().float() @ n.half().float())
    with precision_env(NEURON_CC_FLAGS="--auto-cast matmult --auto-cast-type tf32"):
        tf32 = (m.to("neuron") @ n.to("neuron")).cpu()
    assert torch.equal(tf32, _tf32(m) @ _tf32(n))


def _tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 rounded to nearest even at tf32's 10 mantissa bits, in bit arithmetic."""
    bits = t.view(torch.int32)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF
    return bits.view(torch.float32)


def test_compiled_graphs_round_as_eager_kernels_do():
    """One graph, one Inductor compile: its FP32 matmul computes on bf16-rounded operands
    (``--auto-cast matmult``), and its roundings follow the runtime's switch when it runs:
    to nearest even when off, stochastic and reproducible by seed when on, value for value
    what eager kernels give."""
    a, b = torch.randn(32, 64), torch.randn(64, 16)
    na, nb = a.to("neuron"), b.to("neuron")

    def f(x, y):
        return (x @ y).relu().to(torch.bfloat16)

    with precision_env(NEURON_CC_FLAGS="--auto-cast matmult", NEURON_RT_STOCHASTIC_ROUNDING_EN="1"):
        compiled = torch.compile(f, backend="neuron", fullgraph=True)
        first = _seeded(compiled, 4, na, nb)  # compiles with the switch on, as a job started with it
        with stochastic_rounding(False):
            nearest = compiled(na, nb).cpu()
        again, eager = _seeded(compiled, 4, na, nb), _seeded(f, 4, na, nb)
    assert torch.equal(nearest, (_bf16(a) @ _bf16(b)).relu().bfloat16())
    assert torch.equal(first, again) and not torch.equal(first, nearest)
    assert torch.equal(first, eager)  # the same roundings, drawn in the same order
    assert (first.float() - nearest.float()).abs().mean() < 0.05  # operands and cast off by ulps


def _seeded(fn, seed, *args):
    with stochastic_rounding(True, seed):
        return fn(*args).cpu()


def test_the_graph_pass_rounds_every_fp32_value_under_auto_cast_all():
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch_neuronx.compile import precision_pass

    def f(x, y, bias):
        return torch.addmm(bias, x, y).tanh()

    x, y, bias = torch.randn(8, 16), torch.randn(16, 4), torch.randn(4)
    gm = make_fx(f, tracing_mode="fake")(x, y, bias)
    with precision_env(NEURON_CC_FLAGS="--auto-cast=all"):
        assert precision_pass.apply(gm)
    expected = _bf16(torch.tanh(_bf16(torch.addmm(_bf16(bias), _bf16(x), _bf16(y)))))
    assert torch.equal(gm(x, y, bias), expected)
    gm = make_fx(f, tracing_mode="fake")(x, y, bias)
    with precision_env(NEURON_CC_FLAGS="--auto-cast=matmult"):
        assert precision_pass.apply(gm)  # the matrices, not the bias
    assert torch.equal(gm(x, y, bias), torch.tanh(torch.addmm(bias, _bf16(x), _bf16(y))))


def test_an_auto_cast_fp32_matmul_is_projected_at_the_cast_types_rate():
    """TensorE multiplies the auto-cast operands, so an FP32 matmul costs the bf16 one (4x less
    than FP32 on Trn2) under ``--auto-cast matmult``, and the FP8 one under ``fp8_e4m3``."""
    from torch_neuronx import projection as P

    def seconds(op_dtype, key):
        projector = P.Projector("trn2.3xlarge", lnc=2, calibration=P.defaults())
        meta = torch.empty(2048, 2048, dtype=op_dtype, device="meta")
        return projector.add_signature("aten::mm", key, (meta, meta)).compute_seconds

    fp32, bf16, fp8 = seconds(torch.float32, "a"), seconds(torch.bfloat16, "b"), seconds(torch.float8_e5m2, "c")
    assert fp32 == pytest.approx(4 * bf16)
    with precision_env(NEURON_CC_FLAGS="--auto-cast matmult"):
        assert seconds(torch.float32, "d") == pytest.approx(bf16)
    with precision_env(NEURON_CC_FLAGS="--auto-cast all --auto-cast-type fp8_e4m3"):
        assert seconds(torch.float32, "e") == pytest.approx(fp8)
    assert seconds(torch.float32, "f") == pytest.approx(fp32)


def test_settings_are_described_for_info_and_reports():
    rows = dict(precision.describe())
    assert rows["auto-cast (NEURON_CC_FLAGS)"] == "none"
    assert rows["stochastic rounding (NEURON_RT_STOCHASTIC_ROUNDING_EN)"] == "off (round to nearest even)"
    assert rows["FP8 formats (NeuronCore-v3)"] == "float8_e5m2"
    with precision_env(NEURON_CC_FLAGS="--auto-cast matmult --disable-mixed-precision-accumulation",
                       NEURON_RT_STOCHASTIC_ROUNDING_EN="1", NEURON_RT_STOCHASTIC_ROUNDING_SEED="9"):
        rows = dict(precision.describe())
        assert precision.summary()["auto_cast"] == "matmult"
    assert rows["auto-cast (NEURON_CC_FLAGS)"] == "matmult to bf16"
    assert rows["mixed-precision accumulation"].startswith("off")
    assert rows["stochastic rounding (NEURON_RT_STOCHASTIC_ROUNDING_EN)"] == "on, seed 9"
