"""The projection's record of the collectives a multi-rank job runs (docs/projection.md)."""
import pytest

from launch import check_all_ok, run_ranks

pytestmark = [pytest.mark.fast, pytest.mark.timeout(240)]


def test_neuron_group_records_collectives_for_the_projection():
    check_all_ok(run_ranks("projected_collectives", 2))
