"""A plan's per-rank peak against what the emulator allocates when the same layout
runs on real ranks (TP=2 × FSDP=2, one AdamW step of a tiny Llama)."""
import re

import pytest

from launch import check_all_ok, run_ranks

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def test_plan_peak_within_15_percent_of_emulated_ranks(tmp_path):
    from torch_neuronx.plan import Layout, Planner

    batch, seq = 2, 128
    results = run_ranks("plan_memory", 4, str(tmp_path), str(batch), str(seq), timeout=280)
    check_all_ok(results)
    measured = max(int(re.search(r"PEAK (\d+)", r.output).group(1)) for r in results)
    plan = Planner(str(tmp_path), "trn2.3xlarge", seq, dtype="fp32").memory(Layout(2, 2, batch, False, 2, 1))
    planned = plan["total_bytes"] - plan["bytes"]["runtime_reserve"]  # the emulator reserves nothing
    print(f"planned {planned} B, measured {measured} B per rank")
    assert abs(planned - measured) <= 0.15 * measured, (planned, measured, plan["bytes"])
