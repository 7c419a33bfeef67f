"""The emulated NKI language: semantics, hardware limits, cost estimate, `import nki` alias.

Kernels run under ``nki.simulate`` on NumPy inputs, as with the official
simulator; device (``neuron`` tensor) runs are in test_nki_op.py.
"""
import os
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
import torch

import nki_kernels as K
import torch_neuronx
from torch_neuronx.nki import NkiValidationError, NotEmulatedError, hardware

nki = torch_neuronx.nki
nl, nisa = nki.language, nki.isa

WORKTREE = os.path.dirname(os.path.dirname(os.path.abspath(torch_neuronx.__file__)))


@pytest.fixture(autouse=True)
def _trn2(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    monkeypatch.delenv("NKI_PRECISE_FP", raising=False)


def _rand(*shape, dtype=np.float32):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32).astype(dtype)


# -- tutorial kernels on the simulator -------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_simulate_tutorial_kernels_match_numpy(dtype):
    a, b = _rand(256, 1024, dtype=dtype), _rand(256, 1024, dtype=dtype)[::-1].copy()
    expect = (a.astype(np.float32) + b.astype(np.float32)).astype(dtype)
    out = nki.simulate(K.tensor_add)(a, b)
    assert isinstance(out, np.ndarray) and out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, expect)
    np.testing.assert_array_equal(nki.simulate(K.spmd_tensor_add[2, 2])(a, b), expect)
    lhsT, rhs = _rand(256, 128, dtype=dtype), _rand(256, 512, dtype=dtype)
    ref = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    got = nki.simulate(K.matmul_tiled)(lhsT, rhs).astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=1e-2 if dtype != np.float32 else 1e-5,
                               atol=0.1 if dtype != np.float32 else 1e-4)


def test_spmd_grid_runs_every_program_and_shares_the_output():
    seen = []

    @nki.jit
    def record(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        seen.append((nl.program_id(0), nl.program_id(1), nl.num_programs(), nl.num_programs(1)))
        row = nl.program_id(0)
        nl.store(out[row:row + 1, :], value=nl.load(x[row:row + 1, :]))
        return out

    x = _rand(3, 8)
    np.testing.assert_array_equal(nki.simulate(record[3, 2])(x), x)
    assert seen == [(i, j, 6, 2) for i in range(3) for j in range(2)]


def test_psum_accumulation_rules():
    @nki.jit
    def accumulate_modes(a, b):
        out = nl.ndarray((3, 8, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        a_sb, b_sb = nl.load(a), nl.load(b)
        for i, mode in enumerate((None, True, False)):
            acc = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(acc, a_sb, b_sb, accumulate=False)
            nisa.nc_matmul(acc, a_sb, b_sb, accumulate=mode)
            res = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[i], src=res)
        return out

    a, b = _rand(16, 8), _rand(16, 4)
    out = nki.simulate(accumulate_modes)(a, b)
    once = a.T @ b
    np.testing.assert_allclose(out[0], 2 * once, rtol=1e-5)  # default: later writes accumulate
    np.testing.assert_allclose(out[1], 2 * once, rtol=1e-5)
    np.testing.assert_allclose(out[2], once, rtol=1e-5)  # accumulate=False overwrites


def test_iota_transpose_and_activation_bias_scale():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((4, 6), dtype=nl.float32, buffer=nl.shared_hbm)
        idx = nl.ndarray((4, 6), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(idx, [[1, 6]], offset=10, channel_multiplier=100)
        x_sb = nl.load(x)  # (6, 4)
        t_ps = nl.ndarray((4, 6), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=t_ps, data=x_sb, engine=nisa.engine.tensor)
        act = nl.ndarray((4, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=act, op=nl.copy, data=t_ps, scale=2.0, bias=idx[:, 0:1])
        nl.store(out, value=act)
        return out

    x = _rand(6, 4)
    expect = 2 * x.T + (10 + 100 * np.arange(4))[:, None]
    np.testing.assert_allclose(nki.simulate(kernel)(x), expect, rtol=1e-6)


# -- memory semantics ------------------------------------------------------------------------
def test_new_allocations_hold_nan_so_uninitialised_reads_show():
    @nki.jit
    def half_written(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(tile[:, 0:4], 1.0)
        nisa.dma_copy(dst=out, src=tile)
        return out

    out = nki.simulate(half_written)(_rand(16, 8))
    assert (out[:, :4] == 1).all() and np.isnan(out[:, 4:]).all()


@pytest.mark.parametrize("precise, expected", [("1", 0.0), ("0", 2.0 ** -10)])
def test_precise_fp_switch_rounds_intermediate_bf16_tiles(monkeypatch, precise, expected):
    monkeypatch.setenv("NKI_PRECISE_FP", precise)

    @nki.jit
    def roundtrip(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        x_sb = nl.load(x)
        bumped = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)  # 8 significant bits
        nisa.tensor_scalar(dst=bumped, data=x_sb, op0=nl.add, operand0=2.0 ** -10)
        diff = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=diff, data1=bumped, data2=x_sb, op=nl.subtract)
        nl.store(out, value=diff)
        return out

    out = nki.simulate(roundtrip)(np.ones((4, 4), np.float32))
    np.testing.assert_array_equal(out, np.full((4, 4), expected, np.float32))


# -- hardware limits: each error names the rule and the fix ------------------------------------
def _kernel_raising(body):
    @nki.jit
    def kernel(x):
        body(x)
        return x

    with pytest.raises(NkiValidationError) as info:
        nki.simulate(kernel)(_rand(256, 64))
    return str(info.value)


def test_partition_dimension_over_128_is_rejected():
    message = _kernel_raising(lambda x: nl.load(x))
    assert "partition dimension (shape[0]) is 256" in message and "128 partitions" in message
    assert "Tile the first dimension" in message


def test_sbuf_overflow_is_reported_with_capacity():
    def keep_tiles(x):
        kept = [nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.sbuf) for _ in range(8)]  # 32 KiB each
        assert kept

    message = _kernel_raising(keep_tiles)
    assert "SBUF overflow" in message and "229376 B" in message and "trn2" in message


def test_tiles_released_in_a_loop_do_not_accumulate():
    @nki.jit
    def stream(x):
        for _ in nl.affine_range(16):
            tile = nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(tile, 0.0)
        return x

    nki.simulate(stream)(_rand(4, 4))
    # the new tile exists before the name drops the previous one: two live at the peak
    assert stream.last_estimate.sbuf_peak_bytes == 2 * 8192 * 4


def test_psum_tile_too_wide_and_psum_overflow():
    message = _kernel_raising(lambda x: nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum))
    assert "PSUM tile too wide" in message and "4096 B per partition" in message and "2048 B" in message

    def nine_banks(x):
        banks = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum) for _ in range(9)]
        assert banks

    message = _kernel_raising(nine_banks)
    assert "PSUM overflow" in message and "8 banks" in message


def test_trn3_allows_psum_tiles_spanning_banks(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")

    @nki.jit
    def wide(x):
        acc = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(acc, 0.0)
        return x

    nki.simulate(wide)(_rand(4, 4))
    assert wide.last_estimate.target == "trn3" and wide.last_estimate.psum_peak_bytes == 4096
    assert nl.tile_size.gemm_moving_fmax == 4096


def test_matmul_operand_buffers_and_sizes():
    def stationary_in_hbm(x):
        acc = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
        moving = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_matmul(acc, x[0:128, :], moving)

    message = _kernel_raising(stationary_in_hbm)
    assert "nisa.nc_matmul: stationary" in message and "is in SHARED_HBM" in message
    assert "takes it from SBUF" in message

    def dst_in_sbuf(x):
        tile = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_matmul(tile[0:64, :], tile, tile)

    assert "dst" in _kernel_raising(dst_in_sbuf) and "takes it from PSUM" in _kernel_raising(dst_in_sbuf)

    def moving_too_wide(x):
        acc = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.psum)
        stationary = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        moving = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_matmul(acc, stationary, moving)

    assert "free size 1024 > 512" in _kernel_raising(moving_too_wide)

    def int_accumulator(x):
        acc = nl.ndarray((64, 64), dtype=nl.int32, buffer=nl.psum)
        tile = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_matmul(acc, tile, tile)

    assert "must be float32" in _kernel_raising(int_accumulator)


def test_engines_compute_only_on_chip_and_bitvec_ops_only_on_integers():
    message = _kernel_raising(lambda x: nl.exp(x))
    assert "nl.exp" in message and "read only SBUF and PSUM" in message
    message = _kernel_raising(lambda x: nl.bitwise_and(nl.load(x[0:128, :]), 1))
    assert "bit-vector operator and needs integer tiles" in message

    @nki.jit
    def mask_low_bits(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        res = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=t, op0=nl.bitwise_and, operand0=3)
        nl.store(out, value=res)
        return out

    ints = np.arange(32, dtype=np.int32).reshape(4, 8)
    np.testing.assert_array_equal(nki.simulate(mask_low_bits)(ints), ints & 3)


def test_unsupported_api_names_the_call():
    with pytest.raises(NotEmulatedError, match=r"nki\.isa\.max8 is not emulated yet"):
        nisa.max8
    with pytest.raises(NotEmulatedError, match=r"nki\.language\.gather_flattened is not emulated yet"):
        nl.gather_flattened
    with pytest.raises(AttributeError):
        nl.no_such_api

    @nki.jit
    def fp8_double_row(x):
        acc = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.psum)
        t = nl.load(x)
        nisa.nc_matmul(acc, t, t, perf_mode=nisa.matmul_perf_mode.double_row)
        return x

    with pytest.raises(NotEmulatedError, match=r"nisa\.nc_matmul\(perf_mode=double_row\) is not emulated yet"):
        nki.simulate(fp8_double_row)(_rand(4, 4))


# -- cost estimate ------------------------------------------------------------------------------
def test_estimate_follows_published_rules():
    lhsT, rhs = _rand(256, 128), _rand(256, 512)
    nki.simulate(K.matmul_tiled)(lhsT, rhs)
    est = K.matmul_tiled.last_estimate
    limits = hardware.limits("trn2")
    assert est.kind == "projection" and est.target == "trn2"
    # two fp32 matmuls (K=256 in two tiles): max(N=512, 64) cycles x 4 for fp32 inputs
    assert est.instructions["tensor"] == 2
    assert est.engine_s["tensor"] == pytest.approx(2 * 512 * 4 / limits["tensor_hz"])
    # one PSUM->SBUF copy on VectorE: 512 elements per partition + static overhead
    assert est.engine_s["vector"] == pytest.approx((512 + 100) / limits["vector_hz"])
    moved = (256 * 128 + 256 * 512 + 128 * 512) * 4
    assert est.dma_bytes == moved
    assert est.engine_s["dma"] == pytest.approx(moved / limits["dma_bytes_per_s"])
    assert est.bound_s == max(est.engine_s.values()) and est.serial_s == pytest.approx(sum(est.engine_s.values()))
    assert est.psum_peak_bytes == 2048 and "projection" in str(est)


def test_bf16_matmul_is_four_times_cheaper_on_tensor_engine():
    nki.simulate(K.matmul_tiled)(_rand(128, 128, dtype=ml_dtypes.bfloat16), _rand(128, 512, dtype=ml_dtypes.bfloat16))
    bf16 = K.matmul_tiled.last_estimate.engine_s["tensor"]
    nki.simulate(K.matmul_tiled)(_rand(128, 128), _rand(128, 512))
    assert K.matmul_tiled.last_estimate.engine_s["tensor"] == pytest.approx(4 * bf16)


def test_target_follows_the_instance_profile(monkeypatch):
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE")
    assert hardware.current_target() == torch.neuron.get_device_properties(0).name[:4]
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "gen4")
    assert hardware.current_target() == "trn3"
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn9")
    with pytest.raises(ValueError, match="trn9"):
        hardware.current_target()


def test_every_figure_has_a_citation():
    for target in ("trn1", "trn2", "trn3"):
        for figure in hardware.limits(target):
            assert hardware.citation(target, figure)


# -- `import nki` ------------------------------------------------------------------------------
def _python(code_or_args, tmp_path, extra_path=()):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*extra_path, WORKTREE]))
    args = code_or_args if isinstance(code_or_args, list) else ["-c", textwrap.dedent(code_or_args)]
    return subprocess.run([sys.executable, *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)


def test_import_nki_resolves_to_the_emulation_after_import_torch(tmp_path):
    proc = _python("""
        import torch
        import nki, nki.language as nl, nki.isa as nisa
        import torch_neuronx.nki as emulated
        assert nki is emulated and nl is emulated.language and nisa is emulated.isa
        assert nki.language.NkiTensor is emulated.tensor.NkiTensor
        print("ok")
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_script_whose_first_line_is_import_nki_runs_through_the_module_runner(tmp_path):
    script = tmp_path / "kernel_script.py"
    script.write_text("import nki\nimport nki.language as nl\nimport sys\n"
                      "print(nki.EMULATED, nl.tile_size.pmax, sys.argv[1:])\n")
    proc = _python(["-m", "torch_neuronx.nki", str(script), "--flag"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True 128 ['--flag']"


def test_a_real_nki_package_from_another_finder_is_never_shadowed(tmp_path):
    proc = _python("""
        import importlib.abc, importlib.machinery, importlib.util, sys, types
        class EditableFinder(importlib.abc.MetaPathFinder):  # how setuptools editable installs resolve
            def find_spec(self, name, path=None, target=None):
                if name == "nki":
                    return importlib.machinery.ModuleSpec("nki", Loader())
        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return types.ModuleType("nki")
            def exec_module(self, module):
                module.REAL = True
        sys.meta_path.append(EditableFinder())
        import torch, torch_neuronx
        import nki
        assert nki.REAL
        print("ok")
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_a_real_nki_package_is_never_shadowed(tmp_path):
    real = tmp_path / "site" / "nki"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("REAL = True\n")
    (real / "language.py").write_text("REAL = True\n")
    proc = _python("""
        import torch, torch_neuronx
        import nki, nki.language
        assert nki.REAL and nki.language.REAL and nki.language.__name__ == "nki.language"
        print("ok")
    """, tmp_path, extra_path=[str(tmp_path / "site")])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_out_of_bounds_index_without_mask_is_reported():
    @nki.jit
    def overrun(x):
        ix = nl.arange(128)[:, None]
        iy = nl.arange(8)[None, :]
        nl.load(x[ix, iy])
        return x

    with pytest.raises(NkiValidationError, match="out-of-bounds access.*pass mask="):
        nki.simulate(overrun)(_rand(100, 8))


def _row_sums(access):
    """A kernel summing each row of what ``access(a, tile)`` selects (the access patterns that once read the wrong elements)."""
    @nki.jit
    def row_sums(a):
        tile = nl.load(a[:, 0:256])
        out = nl.ndarray((128, 1), a.dtype, buffer=nl.shared_hbm, name="out")
        nl.store(out, nl.sum(access(a, tile), axis=1, keepdims=True))
        return out
    return nki.simulate(row_sums)


@pytest.mark.parametrize("access, message", [
    (lambda a, t: nl.load(a[:, 384:640]), r"\[:, 384:640\] on the shared_hbm tensor 'a' of shape \[128, 512\]: "
                                          r"index 640 is outside dimension 1, of size 512"),
    (lambda a, t: nl.load(a[:, nl.ds(384, 256)]), r"\[:, 384:640\] on the shared_hbm tensor 'a' .*index 640"),
    (lambda a, t: t[:, 128:384], r"\[:, 128:384\] on the sbuf tensor of shape \[128, 256\]: index 384 is "
                                 r"outside dimension 1, of size 256"),
    (lambda a, t: nl.load(a[128, :]), r"\[128, :\] on the shared_hbm tensor 'a' .*index 128 is outside dimension 0"),
], ids=["slice", "nl.ds", "tile slice", "integer"])
def test_out_of_bounds_slice_is_reported_not_clipped(access, message):
    a = np.ones((128, 512), np.float32)
    np.testing.assert_array_equal(_row_sums(lambda a, t: nl.load(a[:, 256:512]))(a), np.full((128, 1), 256.0))
    with pytest.raises(NkiValidationError, match="out-of-bounds access " + message):
        _row_sums(access)(a)


def test_out_of_bounds_store_names_the_output_and_its_rows():
    @nki.jit
    def overstore(a):
        out = nl.ndarray((128, 8), a.dtype, buffer=nl.shared_hbm, name="out")
        nl.store(out[64:192, :], nl.load(a))
        return out

    with pytest.raises(NkiValidationError, match=r"\[64:192, :\] on the shared_hbm tensor 'out' of shape "
                                                 r"\[128, 8\]: index 192 is outside dimension 0, of size 128"):
        nki.simulate(overstore)(_rand(128, 8))


def test_language_level_functions_match_numpy():
    @nki.jit
    def kernel(x, y):
        out = nl.ndarray((8, 6, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        xs, ys = nl.load(x), nl.load(y)  # (16, 32), (32, 16)
        grid = nl.mgrid[0:16, 0:32]
        results = [
            nl.softmax(xs, axis=1),
            nl.rms_norm(xs, nl.full((16, 32), 2.0, dtype=nl.float32), axis=1, n=32),
            nl.where(nl.greater(xs, 0.0), xs, nl.multiply(xs, 0.1)),
            nl.exp(nl.subtract(xs, nl.max(xs, axis=1, keepdims=True))),
            nl.broadcast_to(nl.mean(xs, axis=1, keepdims=True), (16, 32)),
            nl.load(x[grid.p, grid.x]) * 2 - 1,
        ]
        for i, r in enumerate(results):
            nl.store(out[i], value=r[0:6, 0:16])
        mm = nl.matmul(xs, ys)  # x @ y, x transposed for TensorE by the compiler
        mm_sb = nl.ndarray((16, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=mm_sb, src=mm)
        nl.store(out[6, 0:6, :], value=mm_sb[0:6, :])
        nl.store(out[7, 0:6, :], value=nl.transpose(nl.load_transpose2d(x))[0:6, 0:16])
        return out

    x, y = _rand(16, 32), _rand(32, 16)[::-1].copy()
    out = nki.simulate(kernel)(x, y)
    e = np.exp(x - x.max(1, keepdims=True))
    expected = [
        e / e.sum(1, keepdims=True),
        x / np.sqrt((x ** 2).mean(1, keepdims=True) + 1e-6) * 2,
        np.where(x > 0, x, 0.1 * x),
        e,
        np.broadcast_to(x.mean(1, keepdims=True), (16, 32)),
        2 * x - 1,
        x @ y,
        x,
    ]
    for i, ref in enumerate(expected):
        np.testing.assert_allclose(out[i, 0:6, :], ref[0:6, 0:16], rtol=1e-5, atol=1e-5, err_msg=str(i))


def test_scalar_engine_accumulation_registers():
    @nki.jit
    def sums(x):
        out = nl.ndarray((4, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)  # (4, 8)
        act = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        res = nl.ndarray((4, 3), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=act, op=nl.copy, data=t, reduce_op=nl.add, reduce_res=res[:, 0:1],
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(dst=act, op=nl.copy, data=t, scale=2.0, reduce_op=nl.add, reduce_res=res[:, 1:2],
                        reduce_cmd=nisa.reduce_cmd.reduce)  # registers now hold 1x + 2x the row sums
        nisa.activation(dst=act, op=nl.exp, data=t, reduce_op=nl.add, reduce_res=res[:, 2:3])  # idle: own sums
        nl.store(out, value=res)
        return out

    x = _rand(4, 8)
    out = nki.simulate(sums)(x)
    np.testing.assert_allclose(out[:, 0], x.sum(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[:, 1], 3 * x.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[:, 2], np.exp(x).sum(1), rtol=1e-5)
