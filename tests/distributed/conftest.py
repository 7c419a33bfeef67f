"""Multi-process tests: each test starts its ranks as separate processes (see
launch.py), so nothing here may touch the device of the pytest process."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from launch import RankResult, run_ranks  # noqa: E402
from scenarios import PLAN_BATCH, PLAN_SEQ  # noqa: E402


@pytest.fixture(scope="session")
def tiny_llama_2d_job(tmp_path_factory) -> tuple[Path, list[RankResult]]:
    """One 4-rank TP=2 x FSDP=2 job serves two tests (scenarios.plan_memory_then_two_d): the
    directory holding the model's config, and the ranks' results."""
    config_dir = tmp_path_factory.mktemp("plan-config")
    ckpt_dir = tmp_path_factory.mktemp("dcp") / "ckpt"
    results = run_ranks("plan_memory_then_two_d", 4, str(config_dir), str(PLAN_BATCH), str(PLAN_SEQ),
                        str(ckpt_dir), timeout=400)
    return config_dir, results
