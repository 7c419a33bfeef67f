"""The ``neuron`` process group, checked rank by rank against CPU/gloo.

Each test launches real processes (RANK/LOCAL_RANK/... as torchrun sets them)
and groups many checks per job, because starting a rank (import torch,
transformers) costs seconds. The checks themselves live in scenarios.py.
"""
import json
import math
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from launch import REPO, Job, check_all_ok, rank_env, run_ranks

pytestmark = pytest.mark.timeout(240)


def test_collectives_init_order_and_topology():
    """Every collective and ReduceOp vs gloo on CPU (3 ranks: not a power of two),
    async handles, uneven all_to_all, p2p, object collectives, subgroups; the
    device refuses use before init; init with no backend picks neuron."""
    check_all_ok(run_ranks("collectives", 3))


def test_ranks_exit_cleanly_without_destroying_their_groups():
    """gloo's workers must not outlive the interpreter: before the exit hook,
    4 of 10 such two-rank runs aborted with "terminate called without an
    active exception" after all their work was done."""
    for _ in range(4):
        results = run_ranks("exit_without_destroy", 2)
        check_all_ok(results)
        for r in results:
            assert "terminate called" not in r.output, r.output


@pytest.mark.slow
def test_ddp_fsdp2_tp_sp_against_gloo():
    """Accelerate-initialised job: DDP, FSDP2 (mixed precision, reshard after
    forward + storage resize, activation checkpointing), DTensor, TP and SP."""
    check_all_ok(run_ranks("training", 2))


@pytest.mark.slow
@pytest.mark.timeout(450)
def test_tp_fsdp_tiny_llama_dcp_and_resharding_guard(tiny_llama_2d_job):
    """2-D (dp=2, tp=2) tiny Llama trained with device_id= binding, the
    pre-sharded fully_shard guard, DCP save and reload on a 1-D mesh of 4,
    on the job that also measures test_plan_memory.py's peak.
    (Its neuron-vs-CPU comparison is the example test's --compare-cpu run.)"""
    check_all_ok(tiny_llama_2d_job[1])


FAULT_TIMEOUT_S = 4


def _fault_reports(results):
    culprit, survivors = results[-1], results[:-1]
    messages = []
    for r in survivors:
        assert r.returncode == 0, r.output[-3000:]
        m = re.search(r"FAULT-REPORTED after ([\d.]+)s: (.*)", r.output)
        assert m, r.output[-3000:]
        # bounded: never later than the process-group timeout (+ scheduling slack)
        assert float(m.group(1)) <= FAULT_TIMEOUT_S + 5, m.group(0)
        messages.append(m.group(2))
    return culprit, messages


def test_faults_end_the_job_and_name_the_rank():
    """A rank that raises (3 ranks), exits hard (2) or stalls (2): the others stop
    within the group timeout; the dead rank is named, a stall is explained.
    The three jobs run at once: most of their time is waiting."""
    jobs = {(mode, world): Job("fault", world, mode, str(FAULT_TIMEOUT_S))
            for mode, world in [("raise", 3), ("exit", 2), ("stall", 2)]}
    for (mode, world), job in jobs.items():
        culprit, messages = _fault_reports(job.wait(timeout=120))
        for message in messages:
            if mode == "stall":
                assert "process-group timeout" in message and "still running" in message, message
            else:
                assert culprit.returncode != 0
                assert f"rank {world - 1} (global rank {world - 1}" in message, message
                assert "exited" in message, message


@pytest.mark.exhaustive  # the example end to end under torchrun (20-35 s): make test-exhaustive
def test_tp4_fsdp2_example_under_torchrun_matches_cpu(tmp_path):
    """The CI size of examples/distributed/train_tp_fsdp.py: torchrun, 8 ranks
    (TP4 x FSDP2) on the emulated trn2.48xlarge, with its CPU/gloo rerun."""
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                        "NEURON_RT_VISIBLE_CORES")}
    env.update(TORCHNEURON_INSTANCE="trn2.48xlarge", HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "8",
         str(REPO / "examples" / "distributed" / "train_tp_fsdp.py"), "--tp", "4", "--steps", "3",
         "--compare-cpu", "--report", str(report)],
        env=env, capture_output=True, text=True, timeout=220)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(report.read_text())
    assert (summary["world_size"], summary["tp"], summary["dp"]) == (8, 4, 2)
    assert len(summary["losses"]) == 3 and all(math.isfinite(x) for x in summary["losses"])
    assert summary["max_loss_diff_vs_cpu"] < 1e-4, summary
    # AdamW magnifies last-bit differences (FSDP2 uses AVG on neuron, divide+SUM on gloo)
    assert summary["max_param_diff_vs_cpu"] < 1e-4, summary


def test_more_ranks_than_logical_cores_is_a_clear_error():
    """``import torch`` still works; the first use of the device raises the ConfigError."""
    env = rank_env(0, 5, 1, {"TORCHNEURON_INSTANCE": "trn2.3xlarge"})  # 4 logical cores
    # One process (a rank's start costs seconds): the imports must pass before the use fails.
    code = ("import torch, torch_neuronx; print('imported', flush=True); "
            "torch.randn(1, device='neuron')")
    used = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert used.stdout == "imported\n", used.stderr
    assert used.returncode != 0
    assert "ConfigError" in used.stderr
    assert "5 ranks per node but trn2.3xlarge with LNC=2 has only 4 logical NeuronCores" in used.stderr


def test_backend_is_registered_for_the_neuron_device():
    assert "neuron" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["neuron"] == "neuron"
    assert dist.Backend.backend_capability["neuron"] == ["neuron"]


def test_fault_report_names_an_exited_peer_in_process():
    """PeerTable alone: a peer whose process is gone is named, a live one is not."""
    from torch_neuronx.distributed.faults import PeerTable

    store = dist.HashStore()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.set("neuron_peer/1", f"{os.uname().nodename}|{dead.pid}|7")
    store.set("neuron_peer/2", f"{os.uname().nodename}|{os.getppid()}|8")
    table = PeerTable(store, 0, 3)
    text = table.explain("all_reduce", "group 0", RuntimeError("Connection closed by peer"))
    assert f"rank 1 (global rank 7, pid {dead.pid})" in text and "rank 2" not in text


def test_avg_and_premul_sum_become_sum_plus_scale():
    from torch_neuronx.distributed.process_group import _Reduction

    avg = _Reduction(dist.ReduceOp.AVG, 4)
    assert avg.gloo_op == dist.ReduceOp.SUM and avg.post == 0.25
    ints = torch.tensor([7, -7])
    avg.finish([ints])
    assert ints.tolist() == [1, -1]  # truncation, as NCCL
    pre = _Reduction(dist._make_nccl_premul_sum(0.5), 4)
    assert pre.scale_inputs([torch.tensor([2.0])])[0].item() == 1.0 and pre.post is None
