"""``transformers.Trainer`` with no device arguments trains on ``neuron:0``."""
from __future__ import annotations

import pytest
import torch
from transformers import TrainerCallback

from hf_models import VOCAB, tiny_causal_lm, token_batch


def _dataset(n=16, length=16):
    """Counting sequences (next token = this token + 1): learnable in a few steps."""
    starts = token_batch(batch=n, length=1, seed=1)
    ids = (starts + torch.arange(length) - 3) % (VOCAB - 3) + 3
    return [{"input_ids": row, "labels": row.clone()} for row in ids]


def _trainer(tmp_path, model, max_steps=4, **args):
    from transformers import Trainer, TrainingArguments

    args = {"save_strategy": "no", **args}
    targs = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        max_steps=max_steps,
        learning_rate=2e-2,
        logging_steps=1,
        report_to=[],
        disable_tqdm=True,
        seed=0,
        **args,
    )
    return Trainer(model=model, args=targs, train_dataset=_dataset())


def _losses(trainer):
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_trainer_defaults_to_neuron_and_matches_cpu(tmp_path):
    """No device argument: Transformers' own detection picks ``neuron:0``; the
    loss curve equals a ``use_cpu=True`` run of the same model and data."""
    trainer = _trainer(tmp_path / "neuron", tiny_causal_lm("llama"))
    assert trainer.args.device == torch.device("neuron:0")
    assert trainer.accelerator.device.type == "neuron"
    trainer.train()
    assert {p.device for p in trainer.model.parameters()} == {torch.device("neuron:0")}
    assert all(s.device.type == "neuron" for st in trainer.optimizer.state.values() for s in st.values()
               if isinstance(s, torch.Tensor) and s.dim() > 0)

    reference = _trainer(tmp_path / "cpu", tiny_causal_lm("llama"), use_cpu=True)
    assert reference.args.device.type == "cpu"
    reference.train()
    assert len(_losses(trainer)) == 4
    torch.testing.assert_close(_losses(trainer), _losses(reference), rtol=1e-4, atol=1e-5)
    assert _losses(trainer)[-1] < _losses(trainer)[0]


def test_trainer_bf16_autocasts_on_neuron(tmp_path):
    """``bf16=True`` runs the forward under ``torch.autocast("neuron", bfloat16)``."""
    model = tiny_causal_lm("llama")
    seen = []
    model.lm_head.register_forward_hook(lambda mod, inp, out: seen.append((out.device.type, out.dtype)))
    trainer = _trainer(tmp_path, model, max_steps=3, bf16=True)
    assert trainer.args.mixed_precision == "bf16"
    trainer.train()
    assert seen and set(seen) == {("neuron", torch.bfloat16)}
    losses = _losses(trainer)
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    assert next(trainer.model.parameters()).dtype == torch.float32  # master weights stay fp32


def _state_snapshot(trainer):
    model = {k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()}
    return model, trainer.lr_scheduler.get_last_lr(), trainer.state.global_step


class _StopAfter(TrainerCallback):
    """Interrupts training after ``step`` optimizer steps (like a pre-empted job)."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = state.global_step >= self.step


@pytest.mark.slow
def test_checkpoint_resume_restores_model_optimizer_scheduler_rng(tmp_path):
    """Stop at step 2, resume from the checkpoint: the run ends exactly where an
    uninterrupted one does, so model, optimizer (Adam moments), LR scheduler and
    the CPU RNG (data order) were all restored from a neuron checkpoint."""
    from transformers import Trainer

    full = _trainer(tmp_path / "full", tiny_causal_lm("llama"), max_steps=4, lr_scheduler_type="linear")
    full.train()

    first = _trainer(tmp_path / "resume", tiny_causal_lm("llama"), max_steps=4,
                     lr_scheduler_type="linear", save_strategy="steps", save_steps=2)
    first.add_callback(_StopAfter(2))
    first.train()
    assert first.state.global_step == 2
    ckpt = tmp_path / "resume" / "checkpoint-2"
    assert (ckpt / "optimizer.pt").is_file() and (ckpt / "scheduler.pt").is_file()
    assert (ckpt / "rng_state.pth").is_file()
    saved_optim = torch.load(ckpt / "optimizer.pt", weights_only=True)
    moments = [s["exp_avg"] for s in saved_optim["state"].values()]
    assert moments and all(m.abs().sum() > 0 for m in moments)

    resumed = _trainer(tmp_path / "resume", tiny_causal_lm("llama", seed=7), max_steps=4,
                       lr_scheduler_type="linear")
    assert isinstance(resumed, Trainer)
    resumed.train(resume_from_checkpoint=str(ckpt))
    model_full, lr_full, step_full = _state_snapshot(full)
    model_res, lr_res, step_res = _state_snapshot(resumed)
    assert step_res == step_full == 4
    assert lr_res == lr_full
    for name, value in model_full.items():
        torch.testing.assert_close(model_res[name], value, rtol=1e-5, atol=1e-6, msg=name)
    torch.testing.assert_close(_losses(resumed)[-2:], _losses(full)[-2:], rtol=1e-5, atol=1e-6)


@pytest.mark.xfail(strict=True, reason=(
    "Transformers 5.24 and 5.25: Trainer._save_rng_state/_load_rng_state cover cuda/npu/hpu/mlu/musa/xla but "
    "not neuron: the per-core generator is not in rng_state.pth (Accelerate's save_state does save it)."))
def test_trainer_checkpoint_contains_neuron_rng(tmp_path):
    trainer = _trainer(tmp_path, tiny_causal_lm("llama"), max_steps=1, save_strategy="steps", save_steps=1)
    trainer.train()
    states = torch.load(tmp_path / "checkpoint-1" / "rng_state.pth", weights_only=True)
    assert "neuron" in states

