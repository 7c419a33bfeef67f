"""TRL ``SFTTrainer`` and PEFT LoRA, unchanged, on ``neuron``."""
from __future__ import annotations

import pytest
import torch

from hf_models import text_dataset, tiny_causal_lm, token_batch


def _record_batches(model):
    """Forward pre-hook that records (device, shape) of every ``input_ids`` batch."""
    shapes = []

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        shapes.append((ids.device.type, tuple(ids.shape)))

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return shapes


def _sft(tmp_path, model, tokenizer, **config):
    from trl import SFTConfig, SFTTrainer

    config = {"per_device_train_batch_size": 4, **config}
    args = SFTConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        learning_rate=5e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        dataset_num_proc=None,
        **config,
    )
    return SFTTrainer(model=model, args=args, train_dataset=text_dataset(), processing_class=tokenizer)


def test_sft_pads_batches_to_multiple_of_128_on_neuron(tmp_path, char_tokenizer):
    """TRL 1.16 resolves ``pad_to_multiple_of="auto"`` to 128 because the device is
    ``neuron`` (one compilation per shape); on CPU the same config pads to the longest row."""
    from trl import SFTConfig

    model = tiny_causal_lm("qwen3", max_position_embeddings=256)
    shapes = _record_batches(model)
    trainer = _sft(tmp_path, model, char_tokenizer, max_length=100)
    assert trainer.args.pad_to_multiple_of == 128
    trainer.train()
    assert shapes and all(dev == "neuron" and shape[-1] == 128 for dev, shape in shapes), shapes
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(l > 0 for l in losses)

    cpu_args = SFTConfig(output_dir=str(tmp_path / "cpu"), use_cpu=True, report_to=[])
    assert cpu_args.pad_to_multiple_of is None


@pytest.mark.slow
def test_sft_packing_2048(tmp_path, char_tokenizer):
    """Packing to 2048 tokens: one padding-free row per batch, padded to a multiple of 128."""
    model = tiny_causal_lm("llama", max_position_embeddings=2048)
    shapes = _record_batches(model)
    trainer = _sft(tmp_path, model, char_tokenizer, packing=True, max_length=2048, per_device_train_batch_size=1)
    trainer.train()
    assert shapes
    for dev, (rows, length) in shapes:
        assert dev == "neuron" and rows == 1 and length % 128 == 0 and length <= 2048, shapes
    assert max(length for _, (_, length) in shapes) > 128  # several texts really were packed


def test_lora_train_merge_save_reload(tmp_path):
    """LoRA adapters train on ``neuron``; merge folds them into the base weights
    (merged output equals the adapter output); save -> reload reproduces it."""
    from peft import LoraConfig, PeftModel, get_peft_model

    base = tiny_causal_lm("llama").to("neuron")
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                 lora_dropout=0.0))
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    assert trainable and all(p.device.type == "neuron" for p in trainable)
    optim = torch.optim.AdamW(trainable, lr=1e-2)
    ids = token_batch().to("neuron")
    losses = []
    for _ in range(5):
        loss = peft_model(ids, labels=ids).loss
        loss.backward()
        optim.step()
        optim.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    peft_model.eval()
    with torch.no_grad():
        adapted = peft_model(ids).logits.cpu()

    peft_model.save_pretrained(tmp_path / "adapter")
    reloaded = PeftModel.from_pretrained(tiny_causal_lm("llama").to("neuron"), tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits.cpu(), adapted, rtol=0, atol=0)

    merged = peft_model.merge_and_unload()
    assert not any("lora" in name for name, _ in merged.named_parameters())
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits.cpu(), adapted, rtol=1e-4, atol=1e-5)
    merged.save_pretrained(tmp_path / "merged")

    from transformers import AutoModelForCausalLM

    again = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", device_map="neuron")
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits.cpu(), merged(ids).logits.cpu(), rtol=0, atol=0)
