"""An NKI RMSNorm kernel as a PyTorch op, trained inside a tiny Llama on the emulated device.

The kernel is written for the real NKI (``import nki``): on a Trainium instance
with the Neuron SDK it runs on the NeuronCore; here ``import torch`` made
``nki`` resolve to the emulator, which checks the kernel against trn2's limits
and estimates its time from AWS's published instruction costs (a projection).

    python examples/nki_rmsnorm.py [--steps 4]

Prints both loss curves (stock ``LlamaRMSNorm`` and the kernel), the estimated
time of one kernel call per engine, and the op's compile accounting.
"""
from __future__ import annotations

import argparse
import math

import torch

import nki
import nki.isa as nisa
import nki.language as nl
import torch_neuronx


@nki.jit
def rmsnorm_kernel(x, weight, eps):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last axis of a [rows, dim] tensor."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows_total, dim = x.shape
    P = nl.tile_size.pmax
    w_tile = nl.ndarray((P, dim), dtype=weight.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=w_tile, src=weight.ap(pattern=[[0, P], [1, dim]]))  # every partition reads the weight
    for i in nl.affine_range(math.ceil(rows_total / P)):
        rows = min(P, rows_total - i * P)
        x_tile = nl.ndarray((rows, dim), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_tile, src=x[i * P:i * P + rows, :])
        # ScalarE squares and sums each row in its accumulation registers in one instruction
        squares = nl.ndarray((rows, dim), dtype=nl.float32, buffer=nl.sbuf)
        sum_sq = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=squares, op=nl.square, data=x_tile, reduce_op=nl.add, reduce_res=sum_sq,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        rstd = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd, data=sum_sq, op0=nl.multiply, operand0=1.0 / dim, op1=nl.add, operand1=eps)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=rstd)
        normed = nl.ndarray((rows, dim), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=normed, data=x_tile, op0=nl.multiply, operand0=rstd)
        y_tile = nl.ndarray((rows, dim), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=y_tile, data1=normed, data2=w_tile[0:rows, :], op=nl.multiply)
        nisa.dma_copy(dst=out[i * P:i * P + rows, :], src=y_tile)
    return out


@torch_neuronx.nki_op("nki_examples::rmsnorm", mutates_args=())
def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return rmsnorm_kernel(x, weight, eps)


def _setup_context(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _backward(ctx, grad):
    """The RMSNorm gradient in PyTorch ops (a backward kernel would register the same way)."""
    x, weight = ctx.saved_tensors
    xf, gf = x.float(), grad.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.eps)
    gw = gf * weight.float()
    dx = rstd * gw - xf * rstd.pow(3) * (gw * xf).mean(-1, keepdim=True)
    return dx.to(x.dtype), (gf * xf * rstd).sum(0).to(weight.dtype), None


rmsnorm.register_autograd(_backward, setup_context=_setup_context)


def nki_rmsnorm_forward(self, hidden_states):
    """A drop-in ``LlamaRMSNorm.forward`` calling the kernel on [tokens, hidden]."""
    flat = hidden_states.reshape(-1, hidden_states.shape[-1])
    return rmsnorm(flat, self.weight, self.variance_epsilon).reshape(hidden_states.shape)


def train_tiny_llama(use_nki: bool, steps: int = 4) -> list[float]:
    """Losses of a few AdamW steps of a tiny Llama on `neuron`, with or without the kernel."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama import modeling_llama

    stock = modeling_llama.LlamaRMSNorm.forward
    if use_nki:
        modeling_llama.LlamaRMSNorm.forward = nki_rmsnorm_forward
    try:
        config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).to("neuron")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1)).to("neuron")
        losses = []
        for _ in range(steps):
            loss = model(ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        return losses
    finally:
        modeling_llama.LlamaRMSNorm.forward = stock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    reference = train_tiny_llama(False, args.steps)
    torch_neuronx.reset_metrics()
    with_kernel = train_tiny_llama(True, args.steps)
    print("loss, stock RMSNorm:", " ".join(f"{v:.6f}" for v in reference))
    print("loss, NKI RMSNorm:  ", " ".join(f"{v:.6f}" for v in with_kernel))
    print(f"largest loss difference: {max(abs(a - b) for a, b in zip(reference, with_kernel)):.2e}")
    accounting = torch_neuronx.metrics()["kernels"]["per_op"]["nki_examples::rmsnorm"]
    print(f"nki_examples::rmsnorm (emulated counts): {accounting['calls']} calls, "
          f"{accounting['signatures']} signature(s) compiled")
    print(rmsnorm_kernel.last_estimate)


if __name__ == "__main__":
    main()
