"""TorchTitan 0.3.0 unchanged on ``neuron``, the long runs (``make test-titan``, minutes): every
layout against its live CPU reference, ``--compile.enable``, a distributed checkpoint saved then
resumed, and bad input — a layout that does not divide the ranks, a checkpoint folder from another
layout, a rank that dies mid-step — each ending in a clear error, with no hang and the last good
checkpoint intact (docs/torchtitan.md)."""
from __future__ import annotations

import hashlib
import shutil
import time

import psutil
import pytest

pytest.importorskip("torchtitan")

from titan_harness import LOSS_TOLERANCE, compare, prepare  # noqa: E402

pytestmark = [pytest.mark.exhaustive, pytest.mark.timeout(3600)]
STEPS = 3


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    folder = prepare(tmp_path_factory.mktemp("titan"))
    return folder, compare.seed_checkpoint(folder)


@pytest.fixture(scope="module")
def cpu_runs(workspace):
    """The CPU reference per layout, run once for the eager and the compiled comparison."""
    folder, seed = workspace
    cache = {}

    def get(name: str) -> compare.Run:
        if name not in cache:
            layout = compare.LAYOUTS[name]
            cache[name] = compare.run(folder, layout.nproc, "cpu",
                                      compare.load_only(layout, STEPS, seed, folder / f"cpu-{name}")).check()
        return cache[name]

    return get


@pytest.fixture(scope="module")
def neuron_runs(workspace):
    """The neuron job per layout (and flags), run once."""
    folder, seed = workspace
    cache = {}

    def get(name: str, *extra: str) -> compare.Run:
        if (name, extra) not in cache:
            layout = compare.LAYOUTS[name]
            dump = folder / f"neuron-{name}{'-'.join(('',) + extra).replace('--', '')}"
            cache[name, extra] = compare.run(folder, layout.nproc, "neuron",
                                             compare.load_only(layout, STEPS, seed, dump, *extra)).check()
        return cache[name, extra]

    return get


def _close(got: compare.Run, expected: compare.Run, tolerance: float = LOSS_TOLERANCE) -> None:
    assert sorted(got.losses) == sorted(expected.losses) == list(range(1, STEPS + 1)), got.log[-4000:]
    for step in expected.losses:
        assert abs(got.losses[step] - expected.losses[step]) <= tolerance, (step, got.losses, expected.losses)


@pytest.mark.parametrize("name", ["1", "fsdp2", "tp2", "fsdp2xtp2"])
def test_losses_follow_the_cpu_reference(neuron_runs, cpu_runs, name):
    _close(neuron_runs(name), cpu_runs(name))


@pytest.mark.parametrize("name", ["1", "fsdp2xtp2"])
def test_compiled_losses_follow_the_cpu_reference(neuron_runs, cpu_runs, name):
    """TorchTitan compiles each transformer block with the default backend, which on neuron
    tensors is the neuron backend. One process: the blocks compile, only the block-mask graph
    (no lowering for sort) falls back. With TP the blocks' graphs hold DTensor's collectives,
    which this backend does not lower (docs/torchtitan.md): they run eagerly, logged. The losses
    follow CPU's either way."""
    run = neuron_runs(name, "--compile.enable")
    assert "Compiling each TransformerBlock with torch.compile" in run.log
    fallbacks = {line for line in run.log.splitlines() if "Execution failed" in line}
    assert any("sort" in line for line in fallbacks), fallbacks
    if name == "1":
        assert all("sort" in line for line in fallbacks), fallbacks
    _close(run, cpu_runs(name))


def _digest(folder) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def saved(workspace):
    """FSDP over 2, the whole job with DCP saving the full training state after every step: its
    losses, and its step-1 checkpoint with that checkpoint's digest."""
    folder, seed = workspace
    dump = folder / "saved-fsdp2"
    run = compare.run(folder, 2, "neuron", compare.train_args(
        compare.LAYOUTS["fsdp2"], STEPS, seed, dump, "--checkpoint.interval", "1",
        "--checkpoint.no-last-save-model-only")).check()
    step_1 = dump / "checkpoint" / "step-1"
    return run, step_1, _digest(step_1)


def _stopped_after_step_1(saved, folder, name: str):
    """A dump folder as a job stopped after step 1 leaves it (its step-1 checkpoint only), and a
    check that the checkpoint is still as saved."""
    _, step_1, digest = saved
    copy = folder / name
    shutil.copytree(step_1, copy / "checkpoint" / "step-1")
    return copy, lambda: _digest(copy / "checkpoint" / "step-1") == digest


def test_resume_continues_the_loss_curve(workspace, neuron_runs, saved):
    folder, seed = workspace
    whole = saved[0]
    for step in whole.losses:  # saving changes nothing: the job without checkpoints' losses
        assert abs(whole.losses[step] - neuron_runs("fsdp2").losses[step]) <= 1e-5, whole.losses
    dump, intact = _stopped_after_step_1(saved, folder, "resume")
    resumed = compare.run(folder, 2, "neuron", compare.train_args(compare.LAYOUTS["fsdp2"], STEPS, seed, dump,
                                                                  "--checkpoint.interval", "100")).check()
    assert sorted(resumed.losses) == list(range(2, STEPS + 1)), resumed.log[-4000:]
    for step, loss in resumed.losses.items():
        assert abs(loss - whole.losses[step]) <= 1e-5, (step, resumed.losses, whole.losses)
    assert intact()


def test_layout_that_does_not_divide_the_ranks_fails_fast(workspace):
    folder, seed = workspace
    start = time.monotonic()
    run = compare.run(folder, 3, "neuron", [*compare.BASE_ARGS, "--parallelism.tensor-parallel-degree", "2",
                                            "--training.steps", "1", "--dump-folder", str(folder / "bad"),
                                            "--checkpoint.no-enable"], timeout=600)
    assert run.returncode != 0
    assert "Invalid parallel dims" in run.log and "WORLD_SIZE(3)" in run.log, run.log[-4000:]
    assert time.monotonic() - start < 300


def test_checkpoint_from_another_layout_is_refused_and_kept(workspace, saved):
    """A folder saved by FSDP over 2, resumed by one process: TorchTitan refuses it in one line
    (its dataloader state is per data-parallel rank) and the job ends; the checkpoint is kept."""
    folder, seed = workspace
    dump, intact = _stopped_after_step_1(saved, folder, "other-layout")
    start = time.monotonic()
    run = compare.run(folder, 1, "neuron", compare.train_args(compare.LAYOUTS["1"], STEPS, seed, dump,
                                                              "--checkpoint.load-only"), timeout=900)
    assert run.returncode != 0 and time.monotonic() - start < 300
    assert "dp_degree is inconsistent before and after checkpoint" in run.log, run.log[-4000:]
    assert intact()


def test_a_rank_dying_mid_step_ends_the_job_and_keeps_the_checkpoint(workspace, saved):
    """Rank 1 is killed during step 3 of a job resumed from step 1: torchrun names it and ends
    the job within seconds (the survivor is stopped, never left waiting for the c10d timeout);
    the step-1 checkpoint is intact."""
    folder, seed = workspace
    dump, intact = _stopped_after_step_1(saved, folder, "killed")
    job = compare.Job(folder, 2, "neuron", compare.train_args(
        compare.LAYOUTS["fsdp2"], 5, seed, dump, "--checkpoint.interval", "100", "--checkpoint.load-only",
        "--comm.train-timeout-seconds", "30"))
    rank_1 = _rank_process(job.pid, 1)
    assert job.wait_for_step(2, timeout=900), job.log()
    rank_1.kill()
    start = time.monotonic()
    code = job.wait(timeout=300)
    assert code != 0 and time.monotonic() - start < 120, job.log()[-4000:]
    assert "exitcode: -9" in job.log() and "local_rank: 1" in job.log(), job.log()[-4000:]
    assert intact()


def _rank_process(torchrun_pid: int, local_rank: int) -> psutil.Process:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for child in psutil.Process(torchrun_pid).children(recursive=True):
            try:
                if child.environ().get("LOCAL_RANK") == str(local_rank):
                    return child
            except psutil.Error:
                continue
        time.sleep(0.5)
    raise AssertionError(f"no rank {local_rank} under torchrun {torchrun_pid}")
