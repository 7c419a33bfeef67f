"""tools.eager_instructions: the measured loops run on both devices and count only themselves.

The instruction counts need valgrind and minutes (``python -m tools.eager_instructions``);
here the child's workloads run without it and the counting switch is checked to bracket them.
"""
from __future__ import annotations

import pytest
import torch

from tools import eager_instructions


@pytest.mark.parametrize("workload", eager_instructions.OPS)
@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_the_toggle_brackets_exactly_the_measured_calls(workload, device):
    seen = []
    real_add, real_mul = torch.add, torch.mul

    def counted(fn):
        def wrapper(*args, **kwargs):
            seen.append(fn.__name__)
            return fn(*args, **kwargs)
        return wrapper

    state = {"on": False, "inside": 0}

    def toggle():
        state["on"] = not state["on"]
        if state["on"]:
            seen.clear()
        else:
            state["inside"] = len(seen)

    torch.add, torch.mul = counted(real_add), counted(real_mul)
    try:
        eager_instructions.run_workload(workload, device, 7, toggle)
    finally:
        torch.add, torch.mul = real_add, real_mul
    assert state["on"] is False  # switched on once and off once
    assert state["inside"] == (7 if workload in ("add", "mul") else 0)


def test_unknown_workload_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        eager_instructions.main(["--only", "add,bogus"])
    assert "unknown workload(s) bogus" in capsys.readouterr().err


def test_markdown_says_what_was_measured():
    rows = [{"workload": "add", "count": 10, "cpu": 1000.0, "neuron": 1100.0, "ratio": 1.1}]
    text = eager_instructions.markdown(rows)
    assert "Host measurement: instructions counted by callgrind" in text
    assert "| `add` | op (64×64) | 1,000 | 1,100 | +100 | 1.100 |" in text


# callgrind's closing lines with --cache-sim=yes --branch-sim=yes (a real run's, shortened).
CALLGRIND_TAIL = """==7594== Events    : Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim
==7594== Collected : 42931255 29647632 6318495 1426396 1543359 126595 9441 21379 412 5386689 481994 1014667 423800
==7594==
==7594== I   refs:      42,931,255
"""


def test_cache_events_are_read_by_name_and_reported_per_unit(monkeypatch):
    events = eager_instructions.parse_events(CALLGRIND_TAIL)
    assert events["Ir"] == 42931255 and events["I1mr"] == 1426396 and events["Bim"] == 423800
    assert eager_instructions.parse_events("==1== Collected : 5\n") == {}  # no event names: no counts
    scale = {"cpu": 1, "neuron": 2}
    monkeypatch.setattr(eager_instructions, "count_instructions",
                        lambda workload, device, count, valgrind, size, cache, keep:
                        {name: value * scale[device] for name, value in events.items()})
    [row] = eager_instructions.measure(["decode"], 1, 5, 1, "valgrind", cache=True, log=lambda _: None)
    assert row["cpu"] == 42931255 / 4 and row["ratio"] == 2  # 5 tokens: 4 decode steps
    assert row["misses"]["cpu"] == {"I1 misses": 1426396 / 4, "D1 misses": (1543359 + 126595) / 4,
                                    "mispredicts": (481994 + 423800) / 4}
    text = eager_instructions.markdown([row])
    assert "| `decode` | D1 misses | 417,488 | 834,977 | +417,488 | 2.000 |" in text


def test_the_decode_counts_only_decode_steps(monkeypatch):
    """Three tokens: the prompt's prefill (which also yields token 1) is not counted, the
    two steps that produce tokens 2 and 3 are; one forward (one embedding lookup) per step."""
    real_embedding = torch.nn.functional.embedding
    state = {"on": False, "toggles": 0, "lookups": 0}

    def embedding(*args, **kwargs):
        state["lookups"] += state["on"]
        return real_embedding(*args, **kwargs)

    def toggle():
        state["on"] = not state["on"]
        state["toggles"] += 1

    monkeypatch.setattr(torch.nn.functional, "embedding", embedding)
    eager_instructions.run_workload("decode", "cpu", 3, toggle)
    assert state == {"on": False, "toggles": 2, "lookups": 2}


def test_the_training_counts_only_the_measured_steps(monkeypatch):
    """Two measured steps after an unmeasured first one: one loss (one cross-entropy) and one
    optimizer step each, all inside the counting switch."""
    real_cross_entropy = torch.nn.functional.cross_entropy
    real_step = torch.optim.AdamW.step
    state = {"on": False, "toggles": 0, "losses": 0, "steps": 0}

    def cross_entropy(*args, **kwargs):
        state["losses"] += state["on"]
        return real_cross_entropy(*args, **kwargs)

    def step(self, *args, **kwargs):
        state["steps"] += state["on"]
        return real_step(self, *args, **kwargs)

    def toggle():
        state["on"] = not state["on"]
        state["toggles"] += 1

    monkeypatch.setattr(torch.nn.functional, "cross_entropy", cross_entropy)
    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    eager_instructions.run_workload("train", "cpu", 2, toggle)
    assert state == {"on": False, "toggles": 2, "losses": 2, "steps": 2}


def test_markdown_names_the_unit_of_each_workload():
    rows = [{"workload": w, "count": 2, "cpu": 10.0, "neuron": 11.0, "ratio": 1.1}
            for w in ("decode", "train")]
    text = eager_instructions.markdown(rows)
    assert "| `decode` | token |" in text and "| `train` | step |" in text
    rows[1]["size"] = "smoke"
    assert "| `train` | step (smoke model) |" in eager_instructions.markdown(rows)


def test_the_smoke_size_trains_the_ci_model(monkeypatch):
    """``--size smoke``: the measured step runs the suite's smallest Llama (hidden 32), which a
    callgrind run finishes in minutes."""
    from benchmarks.model import SMOKE

    widths = []
    real_forward = torch.nn.Embedding.forward

    def forward(self, ids):
        widths.append(self.embedding_dim)
        return real_forward(self, ids)

    monkeypatch.setattr(torch.nn.Embedding, "forward", forward)
    eager_instructions.run_workload("train", "cpu", 1, lambda: None, size="smoke")
    assert set(widths) == {SMOKE.hidden}


# callgrind_annotate's per-function lines (real ones, shortened): counts with thousands
# separators, "file:function [object]", recursion marks kept as callgrind names them.
ANNOTATE_CPU = """--------------------------------------------------------------------------------
Ir                  file:function
--------------------------------------------------------------------------------
42,725,348 (100.0%)  PROGRAM TOTALS
6,306,112 (14.76%)  ???:mkl_blas_avx2_xsgemv_t [/venv/torch/lib/libtorch_cpu.so]
2,680,888 ( 6.27%)  /py/Python/ceval.c:_PyEval_EvalFrameDefault'2 [/py/lib/libpython3.11.so.1.0]
  408,840 ( 0.96%)  ???:at::detail::empty_cpu(c10::ArrayRef<long>, std::optional<c10::ScalarType>) [/venv/libtorch_cpu.so]
"""
ANNOTATE_NEURON = """42,176,438 (100.0%)  PROGRAM TOTALS
6,306,112 (14.27%)  ???:mkl_blas_avx2_xsgemv_t [/venv/torch/lib/libtorch_cpu.so]
2,681,288 ( 6.07%)  /py/Python/ceval.c:_PyEval_EvalFrameDefault'2 [/py/lib/libpython3.11.so.1.0]
  363,932 ( 0.82%)  /src/runtime/Alias.cpp:torch_neuronx::(anonymous namespace)::AliasPool::lend(at::Tensor const&, unsigned int&) [/wt/_C.so]
  392,872 ( 0.89%)  ???:at::detail::empty_cpu(c10::ArrayRef<long>, std::optional<c10::ScalarType>) [/venv/libtorch_cpu.so]
"""


def test_functions_are_matched_across_devices_by_name_and_ranked_by_their_difference(monkeypatch, tmp_path):
    cpu = eager_instructions.parse_annotate(ANNOTATE_CPU)
    assert cpu == {"mkl_blas_avx2_xsgemv_t": 6306112, "_PyEval_EvalFrameDefault'2": 2680888,
                   "at::detail::empty_cpu(c10::ArrayRef<long>, std::optional<c10::ScalarType>)": 408840}
    neuron = eager_instructions.parse_annotate(ANNOTATE_NEURON)
    lend = "torch_neuronx::(anonymous namespace)::AliasPool::lend(at::Tensor const&, unsigned int&)"
    assert neuron[lend] == 363932
    text = eager_instructions.function_table("decode", "Ir", {"cpu": cpu, "neuron": neuron}, 4, 3)
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    # Largest difference first; equal counts (the GEMV) fall off the top 3.
    assert rows == [f"| `{lend}` | 0 | 90,983 | +90,983 |",
                    "| `at::detail::empty_cpu(c10::ArrayRef<long>, std::optional<c10::ScalarType>)` "
                    "| 102,210 | 98,218 | -3,992 |",
                    "| `_PyEval_EvalFrameDefault'2` | 670,222 | 670,322 | +100 |"]
    assert text.startswith("`decode`, Ir per token, the functions' own counts:")

    kept = {}
    monkeypatch.setattr(eager_instructions, "count_instructions",
                        lambda workload, device, count, valgrind, size, cache, keep:
                        kept.setdefault(device, keep) and {"Ir": 4 * (2 if device == "neuron" else 1)})
    monkeypatch.setattr(eager_instructions, "by_function",
                        lambda paths, event: {"cpu": cpu, "neuron": neuron} if paths == kept else {})
    [row] = eager_instructions.measure(["decode"], 1, 5, 1, "valgrind", log=lambda _: None, top=1)
    assert kept["cpu"] != kept["neuron"]  # each device's callgrind file kept apart
    assert row["functions"] == [eager_instructions.function_table(
        "decode", "Ir", {"cpu": cpu, "neuron": neuron}, 4, 1)]
    assert row["functions"][0] in eager_instructions.markdown([row])
