"""The small, listed edits applied to upstream test files before they run, each with its reason.

A shim names the exact text it replaces (every occurrence); if that text is not
in the file the run stops (:class:`ShimError`), so a shim never silently stops
applying when upstream changes. Every shim is printed in the report.

:data:`SHIMS` bridge version gaps and always apply. :data:`EVIDENCE` apply only
with ``--evidence``: each changes one assumption of an upstream test that fails
on neuron, so a run shows the test passes once that assumption is lifted (the
change an upstream pull request would make).
"""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path


class ShimError(RuntimeError):
    """A shim's text was not found in the file it is for: the shim is stale."""


@dataclasses.dataclass(frozen=True)
class Shim:
    library: str
    path: str  # relative to the suite directory
    old: str
    new: str
    why: str
    # (file under the suite directory, module-level name): that assignment's source, read from the
    # obtained upstream file at run time, is appended to the shimmed file (nothing upstream is kept here)
    carry: tuple[str, str] | None = None


SHIMS = (
    Shim("transformers", "tests/causal_lm_tester.py",
         "    _TEXT_MODEL_TESTER_DEFAULTS,\n", "",
         "the snapshot's causal-LM tester imports `_TEXT_MODEL_TESTER_DEFAULTS` from the snapshot's "
         "`transformers.testing_utils`, which 5.24 does not define; the snapshot's own definition is used",
         carry=("src/transformers/testing_utils.py", "_TEXT_MODEL_TESTER_DEFAULTS")),
    Shim("transformers", "tests/causal_lm_tester.py",
         "from .test_fsdp_mixin import FSDPTesterMixin\n", "",
         "Transformers 5.24's FSDP and tensor-parallel test mixins import `tests/distributed_testing_utils.py`, "
         "which its sdist does not ship (nor has the snapshot); the snapshot's mixins need 5.16-dev library "
         "functions 5.24 lacks (`expand_fsdp_plan`). Their multi-process tests are left out of the run"),
    Shim("transformers", "tests/causal_lm_tester.py",
         "from .test_tensor_parallel_mixin import TensorParallelTesterMixin\n", "", "as above"),
    Shim("transformers", "tests/causal_lm_tester.py",
         "    TensorParallelTesterMixin,\n    FSDPTesterMixin,\n):", "):", "as above"),
    Shim("transformers", "tests/test_pipeline_mixin.py",
         'PATH_TO_TRANSFORMERS = os.path.join(Path(__file__).parent.parent, "src/transformers")\n',
         'PATH_TO_TRANSFORMERS = os.path.dirname(__import__("transformers").__file__)\n',
         "the pipeline mixin imports Transformers from the repository's `src/transformers`; the installed "
         "library is the one under test"),
    Shim("transformers", "tests/test_configuration_common.py",
         "from .utils.test_configuration_utils import config_common_kwargs\n", "",
         "`config_common_kwargs` lives in a test module that imports `httpx`, which Transformers 5.24 "
         "does not need and this environment does not have; its definition is carried over",
         carry=("tests/utils/test_configuration_utils.py", "config_common_kwargs")),
    Shim("trl", "tests/testing_utils.py",
         "    is_joblib_available,\n", "",
         "the 1.10-dev snapshot's test helpers import `trl.import_utils.is_joblib_available`, which TRL "
         "1.16 does not have; the check is made with `importlib.util.find_spec('joblib')`"),
    Shim("trl", "tests/testing_utils.py",
         "is_joblib_available()", '(__import__("importlib.util").util.find_spec("joblib") is not None)',
         "as above"),
    Shim("peft", "tests/testing_common.py",
         "from .testing_utils import get_state_dict, hub_online_once\n",
         "from .testing_utils import get_state_dict, hub_online_once, torch_device as _accelerate_device\n",
         "PEFT's common tester takes its device from `peft.utils.infer_device()`, which knows cuda, mps, "
         "mlu, xpu and npu but not neuron, while PEFT's own `tests/testing_utils.py` uses Accelerate's "
         "`get_backend()`, which knows neuron; without this the 'neuron' run would test cpu again"),
    Shim("peft", "tests/testing_common.py",
         "    torch_device = infer_device()\n",
         "    torch_device = _accelerate_device\n",
         "second half of the shim above"),
)


EVIDENCE = (
    Shim("transformers", "tests/test_modeling_common.py",
         '            if torch_device in ["cpu", "cuda"]:\n'
         '                atol = atols[torch_device, enable_kernels, dtype]\n'
         '                rtol = rtols[torch_device, enable_kernels, dtype]\n',
         '            if torch_device in ["cpu", "cuda", "neuron"]:\n'
         '                atol = atols[torch_device.replace("neuron", "cpu"), enable_kernels, dtype]\n'
         '                rtol = rtols[torch_device.replace("neuron", "cpu"), enable_kernels, dtype]\n',
         "test_eager_matches_sdpa_inference_*_fp16_*: a device missing from the eager-vs-SDPA tolerance "
         "table is held to atol 1e-7 (cpu: 5e-3 in fp16); the emulated device runs cpu's kernels "
         "bit-identically (tests/hf/test_upstream_assumptions.py), so it gets cpu's row"),
    Shim("transformers", "tests/generation/test_utils.py",
         "CompileConfig(", 'CompileConfig(backend="neuron" if torch_device == "neuron" else "inductor", ',
         "the compiled-generate tests use `CompileConfig()`, whose backend is 'inductor', which cannot "
         "compile neuron tensors (as on Trainium); `backend='neuron'` is the device's compiler"),
)


def apply(library: str, root: Path, shims: tuple[Shim, ...] = SHIMS) -> list[Shim]:
    """Apply ``library``'s shims to the files present under ``root``; returns those applied."""
    applied = []
    for shim in shims:
        path = root / shim.path
        if shim.library != library or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        if shim.old not in text:
            raise ShimError(f"shim for {shim.library} {shim.path} is stale: {shim.old.strip()!r} not found")
        text = text.replace(shim.old, shim.new)
        if shim.carry:
            text += "\n\n# carried over by tools/upstream/shims.py\n" + _assignment(root / shim.carry[0], shim.carry[1])
        path.write_text(text, encoding="utf-8")
        applied.append(shim)
    return applied


def _assignment(path: Path, name: str) -> str:
    """The source of the module-level assignment to ``name`` in ``path``."""
    if not path.is_file():
        raise ShimError(f"shim needs {path}, which was not obtained")
    source = path.read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.get_source_segment(source, node) + "\n"
    raise ShimError(f"shim is stale: no module-level {name} in {path}")
