"""DTensor random ops on ``neuron`` (``torch_neuronx/distributed/dtensor_random.py``):
``torch.nn.init`` on FSDP2 / TP / 2-D shards, DTensor factories and dropout in a
TP region give, on 4 ranks, meshes of 2 and 4 and every layout, exactly the
values the same draw gives made whole on one core after the same seed, and
leave the generator where the unsharded draws leave it: with
``TORCHNEURON_RNG=counter``, under which plain random ops draw from the cores'
counter-based generators too (by default they draw from the CPU generator, as
on the real product). Under the default source a DTensor's dropout still draws
from the core's generator: a new mask on each call (DTensor's region restores
the CPU generator, so CPU draws there would repeat), made up of the same shards."""
import pytest

from launch import check_all_ok, run_ranks

pytestmark = pytest.mark.timeout(240)


def test_sharded_draws_equal_the_unsharded_draw_on_every_layout():
    results = run_ranks("rng_scenarios:layouts", 4, env={"TORCHNEURON_RNG": "counter"})
    check_all_ok(results)
    assert all("equal the unsharded draws" in r.output for r in results)
