"""NKI kernels written as the NKI documentation writes them, for tests/test_nki*.py.

They import ``nki`` exactly as a kernel file for the real Neuron SDK does; here
the import resolves to torch_neuronx.nki (``import torch`` installed the alias).
"""
import math

import torch  # noqa: F401  (installs the `nki` import alias through the backend autoload)

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def tensor_add(a_input, b_input):
    """Tiled elementwise add, destination-passing style (tensor-addition tutorial)."""
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    M, N = a_input.shape
    TILE_M, TILE_N = nl.tile_size.pmax, 512
    assert M % TILE_M == 0 and N % TILE_N == 0
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            rows, cols = slice(m * TILE_M, (m + 1) * TILE_M), slice(n * TILE_N, (n + 1) * TILE_N)
            a_tile = nl.ndarray((TILE_M, TILE_N), dtype=a_input.dtype, buffer=nl.sbuf)
            b_tile = nl.ndarray((TILE_M, TILE_N), dtype=b_input.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a_tile, src=a_input[rows, cols])
            nisa.dma_copy(dst=b_tile, src=b_input[rows, cols])
            c_tile = nl.ndarray((TILE_M, TILE_N), dtype=a_input.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
            nisa.dma_copy(dst=c_output[rows, cols], src=c_tile)
    return c_output


@nki.jit
def spmd_tensor_add(a_input, b_input):
    """One [128, 512] tile per SPMD program, legacy index style: launch as ``kernel[M // 128, N // 512]``."""
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 512 + nl.arange(512)[None, :]
    a_tile = nl.load(a_input[ix, iy])
    b_tile = nl.load(b_input[ix, iy])
    c_tile = a_tile + b_tile
    nl.store(c_output[ix, iy], value=c_tile)
    return c_output


@nki.jit
def matmul_tiled(lhsT, rhs):
    """``lhsT.T @ rhs`` tiled over M, N and K; K tiles accumulate in one PSUM tile (matmul tutorial)."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    assert K == K_
    TILE_M = nl.tile_size.gemm_stationary_fmax
    TILE_K = nl.tile_size.pmax
    TILE_N = nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            res_psum = nl.ndarray((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                lhsT_tile = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lhsT_tile, src=lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                nisa.dma_copy(dst=rhs_tile, src=rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                nisa.nc_matmul(dst=res_psum, stationary=lhsT_tile, moving=rhs_tile)
            res_sb = nl.ndarray(res_psum.shape, dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res_sb, src=res_psum)
            nisa.dma_copy(dst=result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], src=res_sb)
    return result


@nki.jit
def rmsnorm(a_tensor, g_tensor):
    """``a / rms(a) * g`` over the last axis, 128 rows at a time (RMSNorm tutorial, high-level ops)."""
    out_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    num_rows, dim = a_tensor.shape
    assert dim == g_tensor.shape[0]
    g_tile = nl.load(g_tensor.reshape((1, dim)))
    for i in nl.affine_range(math.ceil(num_rows / 128)):
        rows = nl.ds(i * 128, min(128, num_rows - i * 128))
        a_tile = nl.load(a_tensor[rows, :])
        square_sum = nl.sum(nl.square(a_tile), axis=[1], keepdims=True)
        rms_reciprocal = nl.rsqrt(square_sum / dim)
        out_tile = nl.multiply(a_tile, rms_reciprocal)
        out_tile = nl.multiply(out_tile, g_tile)
        nl.store(out_tensor[rows, :], value=out_tile)
    return out_tensor


@nki.jit
def softmax(x):
    """Row softmax: VectorE max, ScalarE exp with the row sum in its accumulator, VectorE scale."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows_total, dim = x.shape
    P = nl.tile_size.pmax
    for i in nl.affine_range(rows_total // P):
        x_tile = nl.ndarray((P, dim), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_tile, src=x[i * P:(i + 1) * P, :])
        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=x_tile, axis=1, negate=True, keepdims=True)
        exp = nl.ndarray((P, dim), dtype=nl.float32, buffer=nl.sbuf)
        row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(dst=exp, op=nl.exp, data=x_tile, bias=neg_max, reduce_op=nl.add, reduce_res=row_sum)
        inv_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv_sum, data=row_sum)
        y_tile = nl.ndarray((P, dim), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y_tile, data=exp, op0=nl.multiply, operand0=inv_sum)
        nisa.dma_copy(dst=out[i * P:(i + 1) * P, :], src=y_tile)
    return out


@nki.jit
def attention_fwd(q_t, k_t, v):
    """Single-head ``softmax(q k^T / sqrt(d)) v`` with q_t, k_t as [d, seq] and v as [seq, d].

    S = q k^T on TensorE into PSUM (contraction over d on partitions), softmax on
    Vector/Scalar engines, P^T per 128-key block by TensorE transpose, then P v
    accumulated over key blocks in PSUM.
    """
    d, seq_q = q_t.shape
    _, seq_k = k_t.shape
    P = nl.tile_size.pmax
    assert d <= P and seq_q % P == 0 and seq_k % P == 0 and seq_k <= nl.tile_size.gemm_moving_fmax
    out = nl.ndarray((seq_q, d), dtype=q_t.dtype, buffer=nl.shared_hbm)
    k_tile = nl.ndarray((d, seq_k), dtype=k_t.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=k_tile, src=k_t)
    v_tiles = nl.ndarray((P, seq_k // P, d), dtype=v.dtype, buffer=nl.sbuf)
    for j in nl.affine_range(seq_k // P):
        nisa.dma_copy(dst=v_tiles[:, j, :], src=v[j * P:(j + 1) * P, :])
    scale = 1.0 / math.sqrt(d)
    for i in nl.affine_range(seq_q // P):
        q_tile = nl.ndarray((d, P), dtype=q_t.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=q_tile, src=q_t[:, i * P:(i + 1) * P])
        scores = nl.ndarray((P, seq_k), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=scores, stationary=q_tile, moving=k_tile)
        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=scores, axis=1, negate=True, keepdims=True)
        nisa.tensor_scalar(dst=neg_max, data=neg_max, op0=nl.multiply, operand0=scale)
        probs = nl.ndarray((P, seq_k), dtype=v.dtype, buffer=nl.sbuf)
        row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(dst=probs, op=nl.exp, data=scores, scale=scale, bias=neg_max,
                               reduce_op=nl.add, reduce_res=row_sum)
        out_psum = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum)
        for j in nl.affine_range(seq_k // P):
            probs_t_psum = nl.ndarray((P, P), dtype=v.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=probs_t_psum, data=probs[:, j * P:(j + 1) * P])
            probs_t = nl.ndarray((P, P), dtype=v.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=probs_t, src=probs_t_psum)
            nisa.nc_matmul(dst=out_psum, stationary=probs_t, moving=v_tiles[:, j, :])
        inv_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv_sum, data=row_sum)
        out_tile = nl.ndarray((P, d), dtype=q_t.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=out_tile, data=out_psum, op0=nl.multiply, operand0=inv_sum)
        nisa.dma_copy(dst=out[i * P:(i + 1) * P, :], src=out_tile)
    return out


@nki.jit
def rmsnorm_masked(a_tensor, g_tensor):
    """The RMSNorm tutorial's legacy form: nl.arange index grids, masks for the last partial tile."""
    out_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    assert a_tensor.shape[1] == g_tensor.shape[0]
    ix = nl.arange(128)[:, None]
    iw = nl.arange(1)[:, None]
    iy = nl.arange(a_tensor.shape[1])[None, :]
    num_rows = a_tensor.shape[0]
    g_tile = nl.load(g_tensor.reshape((1, g_tensor.shape[0]))[iw, iy])
    for i in nl.affine_range(math.ceil(a_tensor.shape[0] / 128)):
        a_tile = nl.load(a_tensor[i * 128 + ix, iy], mask=(i * 128 + ix < num_rows))
        square_sum = nl.sum(nl.square(a_tile), axis=[1])  # a [128] tile: one value per partition
        rms_reciprocal = nl.rsqrt(square_sum / a_tensor.shape[1])
        out_tile = nl.multiply(a_tile, rms_reciprocal)
        g_bcast = g_tile.broadcast_to((128, g_tensor.shape[0]))
        out_tile[...] = nl.multiply(out_tile, g_bcast, mask=(i * 128 + ix < num_rows))
        nl.store(out_tensor[i * 128 + ix, iy], value=out_tile, mask=(i * 128 + ix < num_rows))
    return out_tensor
