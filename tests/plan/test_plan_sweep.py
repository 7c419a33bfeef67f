"""Every architecture of the curated coverage list plans, training and serving, at TP 1, 8 and 32
on a trn1.32xlarge and TP 4 and 64 on a trn2.48xlarge (tiny configs: 4 query heads, 2 KV heads,
so TP 8 and up pads them).

The fast test takes the shape path of every combination: the job and layout checks, the exact
per-rank parameter count under the TP plan (Transformers' or the derived one), and the rank's
own model built from its per-rank config on the meta device (or the whole-model fallback the
trace takes when an architecture cannot be shrunk). The exhaustive test (about 6 minutes;
``make test-plan-sweep``, outside ``make test``) traces and projects every combination end to end."""
from __future__ import annotations

import pytest

from torch_neuronx.coverage.popular import POPULAR_TEXT_GENERATION
from torch_neuronx.plan import Layout, Planner
from torch_neuronx.plan.trace import Workload, _rank_layer
from torch_neuronx.testing.tiny_models import tiny_config

LAYOUTS = [("trn1.32xlarge", tp, 1) for tp in (1, 8, 32)] + [("trn2.48xlarge", tp, 2) for tp in (4, 64)]


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    root = tmp_path_factory.mktemp("archs")
    paths = {}
    for arch in POPULAR_TEXT_GENERATION:
        tiny_config(arch).save_pretrained(root / arch)
        paths[arch] = str(root / arch)
    return paths


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_every_curated_architecture_plans_at_every_tp_shape_path(configs, mode):
    refused = {}
    for arch, path in configs.items():
        for instance, tp, lnc in LAYOUTS:
            planner = Planner(path, instance, 16, mode=mode, decode_tokens=4 if mode == "infer" else None)
            layout = Layout(tp, 1, 1, False, lnc, 1)
            planner.check(layout)
            counts = planner.ctx.parameters(tp, 1)
            assert 0 < counts.tp_local <= counts.total + counts.padding_tp_local, (arch, tp)
            assert (tp == 1) == (counts.tp_plan == "no tensor parallelism"), (arch, tp, counts.tp_plan)
            work = Workload(mode, tp, 1, 16, planner.ctx.job.dtype, heads=planner.ctx.heads(tp),
                            rank_parameters=counts.layer_unsharded)
            if tp > 1 and _rank_layer(planner.config, work) is None:
                refused[(arch, tp)] = "the rank's config is refused by the architecture: whole-model share"
    # a rank's model the architecture refuses is traced whole and scaled, never an error
    assert all(reason.startswith("the rank's config") for reason in refused.values())


@pytest.mark.exhaustive
@pytest.mark.parametrize("arch", POPULAR_TEXT_GENERATION)
def test_every_curated_architecture_plans_end_to_end(configs, arch):
    for mode in ("train", "infer"):
        for instance, tp, lnc in LAYOUTS:
            plan = Planner(configs[arch], instance, 16, mode=mode,
                           decode_tokens=4 if mode == "infer" else None).plan(Layout(tp, 1, 1, False, lnc, 1))
            figure = plan.time.chosen.step_seconds if mode == "train" else plan.time.chosen.ttft_seconds
            assert plan.fits and figure > 0, (arch, mode, tp)
