"""End-to-end eager training on ``neuron`` against the same run on CPU:
optimizers (incl. foreach and fused AdamW) and a tiny Transformers Llama."""
from __future__ import annotations

import copy

import pytest
import torch


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                               torch.nn.Dropout(0.0), torch.nn.Linear(32, 4))


def _train(model, optimizer_factory, device, steps=3):
    model = model.to(device)
    opt = optimizer_factory(model.parameters())
    torch.manual_seed(1)
    data = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(steps)]
    losses = []
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()], opt


@pytest.mark.parametrize("factory", [
    lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=False),
    lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=True),
    lambda p: torch.optim.AdamW(p, lr=1e-2, fused=True),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True, foreach=True),
], ids=["adamw", "adamw-foreach", "adamw-fused", "sgd", "adam-amsgrad"])
def test_optimizer_matches_cpu(factory):
    model = _mlp()
    cpu_losses, cpu_params, _ = _train(copy.deepcopy(model), factory, "cpu")
    dev_losses, dev_params, opt = _train(copy.deepcopy(model), factory, "neuron")
    torch.testing.assert_close(dev_losses, cpu_losses)
    for a, b in zip(dev_params, cpu_params):
        torch.testing.assert_close(a, b)
    state = next(iter(opt.state.values()))
    assert all(v.device.type == "neuron" for v in state.values()
               if isinstance(v, torch.Tensor) and v.dim() > 0)


def test_sdpa_matches_cpu_forward_and_backward():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16, requires_grad=True) for _ in range(3))
    mask = torch.ones(8, 8, dtype=torch.bool).tril()
    results = []
    for device in ("cpu", "neuron"):
        qd, kd, vd = (t.detach().to(device).requires_grad_() for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
        out2 = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd,
                                                                attn_mask=mask.to(device))
        (out.sum() + out2.pow(2).sum()).backward()
        results.append([t.detach().cpu() for t in (out, out2, qd.grad, kd.grad, vd.grad)])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_sdpa_dropout_follows_torch_manual_seed():
    # Random ops on neuron draw from the CPU generator (docs/device.md).
    q = torch.randn(1, 2, 16, 8, device="neuron")
    outs = []
    for _ in range(2):
        torch.manual_seed(3)
        outs.append(torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.5))
    assert torch.equal(outs[0].cpu(), outs[1].cpu())


def _tiny_llama():
    from torch_neuronx.testing.tiny_models import TinySize, tiny_causal_lm

    return tiny_causal_lm("llama", TinySize(vocab=128, positions=64), tie_word_embeddings=True)


def test_tiny_llama_forward_backward_generate_matches_cpu():
    cpu_model = _tiny_llama()
    dev_model = copy.deepcopy(cpu_model).to("neuron")
    assert dev_model.lm_head.weight is dev_model.model.embed_tokens.weight
    ids = torch.randint(0, 128, (2, 12))
    outs = {}
    for name, model in (("cpu", cpu_model), ("neuron", dev_model)):
        device = next(model.parameters()).device
        out = model(ids.to(device), labels=ids.to(device))
        out.loss.backward()
        gen = model.generate(ids[:, :5].to(device), max_new_tokens=8, do_sample=False,
                             pad_token_id=0)
        grads = {n: p.grad.cpu() for n, p in model.named_parameters()}
        outs[name] = (out.logits.detach().cpu(), out.loss.item(), grads, gen.cpu())
    (l_cpu, loss_cpu, g_cpu, gen_cpu), (l_dev, loss_dev, g_dev, gen_dev) = outs["cpu"], outs["neuron"]
    torch.testing.assert_close(l_dev, l_cpu, atol=1e-5, rtol=1e-4)
    assert loss_dev == pytest.approx(loss_cpu, rel=1e-5)
    assert g_dev.keys() == g_cpu.keys()
    for n in g_cpu:
        torch.testing.assert_close(g_dev[n], g_cpu[n], atol=1e-5, rtol=1e-4, msg=n)
    assert torch.equal(gen_dev, gen_cpu)
    assert gen_dev.shape == (2, 13)


@pytest.mark.parametrize("fn", [torch.sgn, torch.sign, torch.round, torch.floor])
def test_zero_gradients_are_real_device_tensors(fn):
    # These backward formulas return autograd's storage-less "efficient zero
    # tensors"; on neuron they must arrive as real zeros (reading one used to
    # crash the process).
    x = torch.randn(20, 20, device="neuron", requires_grad=True)
    (grad,) = torch.autograd.grad(fn(x).sum(), [x])
    assert grad.device == x.device
    torch.testing.assert_close(grad.cpu(), torch.zeros(20, 20))
    (grad,) = torch.autograd.grad((fn(x) * 3 + x).sum(), [x])
    torch.testing.assert_close(grad.cpu(), torch.ones(20, 20))
