"""Builds the small C++ core (`torch_neuronx._C`) with PyTorch's cpp_extension.

The build is shaped for a 2-core machine (README, "Set-up"):
- unity units: consecutive source files are compiled as one translation unit (a generated
  .cpp in the build dir that #includes them), so PyTorch's headers are parsed once per unit
  instead of once per file; the source tree keeps one file per route table / kernel;
- `-g1` (line tables only): Python's CFLAGS carry `-g`, whose full debug info for every
  PyTorch type doubled the compile time; backtraces keep file:line;
- a fixed build dir, so `pip install -e` and `setup.py build_ext --inplace` share ninja's
  state and an edit recompiles one unit;
- ccache, when installed, is put in front of the compiler by cpp_extension itself.
"""
import glob
import os

# Building must not autoload a previously installed (maybe half-built) backend.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join("torch_neuronx", "csrc")

# Files compiled together, paths relative to csrc/. A unit is a run of consecutive files in
# sorted order: the static initialisers (route tables, fork handlers) then run in the same
# order as in a file-by-file build. Files that define the same name in an anonymous namespace
# (each fork handler is `g_fork_handler`) sit in different units. A file in no unit is
# compiled on its own.
UNITY_UNITS = {
    "aten_routes_a": ["aten/AttentionRoutes.cpp", "aten/AutocastRoutes.cpp", "aten/CpuFallbackRoutes.cpp"],
    "aten_routes_b": ["aten/FastPathRoutes.cpp", "aten/MemoryFormatRoutes.cpp", "aten/NativeRoutes.cpp",
                      "aten/ScaledMatmulRoutes.cpp"],
    "aten_native": ["aten/native/Attention.cpp", "aten/native/Call.cpp",
                    "aten/native/CounterRandom.cpp", "aten/native/CpuFallback.cpp",
                    "aten/native/GeneratorLease.cpp", "aten/native/Kernels.cpp",
                    "aten/native/MemoryFormat.cpp", "aten/native/ScaledMatmul.cpp"],
    "numerics": ["numerics/Narrowing.cpp", "numerics/Precision.cpp", "numerics/Rounding.cpp"],
    "runtime_memory": ["runtime/Alias.cpp", "runtime/Allocator.cpp", "runtime/AllocatorAddresses.cpp",
                       "runtime/AllocatorHistory.cpp", "runtime/AllocatorPools.cpp",
                       "runtime/AllocatorSnapshot.cpp"],
    "runtime_device": ["runtime/Device.cpp", "runtime/Fork.cpp", "runtime/Generators.cpp",
                       "runtime/GraphInputs.cpp", "runtime/Guard.cpp"],
}


def _write_if_changed(path, text):
    """An unchanged unity file keeps its mtime, so ninja does not recompile the unit."""
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == text:
                return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def unity_sources(sources, unity_dir):
    """One generated .cpp per translation unit of `sources` (sorted csrc/ paths).

    distutils sorts the sources it compiles and links them in that order; the generated
    names carry the unit's position so that sorting keeps the order of `sources`."""
    relative = [os.path.relpath(s, CSRC).replace(os.sep, "/") for s in sources]
    for unit, names in UNITY_UNITS.items():
        missing = [n for n in names if n not in relative]
        if missing:
            raise SystemExit(f"setup.py: unity unit {unit!r} lists missing sources {missing}")
        start = relative.index(names[0])
        if relative[start:start + len(names)] != names:
            raise SystemExit(f"setup.py: unity unit {unit!r} is not a run of consecutive sources "
                             f"in sorted order: {names}")
    unit_of = {name: unit for unit, names in UNITY_UNITS.items() for name in names}
    units = []  # (unit name, files)
    for name in relative:
        unit = unit_of.get(name)
        if unit is None:
            units.append((name[:-len(".cpp")].replace("/", "_"), [name]))
        elif UNITY_UNITS[unit][0] == name:
            units.append((unit, UNITY_UNITS[unit]))
    paths = []
    for position, (unit, names) in enumerate(units):
        path = os.path.join(unity_dir, f"{position:02d}_{unit}.cpp")
        _write_if_changed(path, "".join(f'#include "{n}"\n' for n in names))
        paths.append(path)
    return paths


class UnityBuildExtension(BuildExtension):
    def finalize_options(self):
        super().finalize_options()
        # pip's editable build would otherwise use a fresh temp dir and recompile everything.
        self.build_temp = os.path.join(HERE, "build", "temp")

    def build_extensions(self):
        for ext in self.extensions:
            # distutils skips the build when the .so is newer than sources + depends: the
            # generated units keep their mtime, so the files they include must be listed.
            ext.depends = ext.depends + ext.sources
            ext.sources = unity_sources(ext.sources, os.path.join("build", "unity"))
        super().build_extensions()


setup(
    ext_modules=[
        CppExtension(
            name="torch_neuronx._C",
            # csrc/{runtime,aten,aten/native,accounting,numerics}: see csrc/README.md.
            sources=sorted(glob.glob(os.path.join(CSRC, "**", "*.cpp"), recursive=True)),
            depends=sorted(glob.glob(os.path.join(CSRC, "**", "*.h"), recursive=True)),
            # Kineto's headers (profiler/DeviceTrace.cpp) include each other by bare name.
            include_dirs=[os.path.abspath(CSRC), os.path.join(include_paths()[0], "kineto")],
            # Hidden visibility: only PyInit__C is exported, so calls between our own functions
            # are direct (no PLT stub and GOT load per call, no interposition to assume) and may
            # be inlined within a unity unit; the per-op path's instruction-cache footprint.
            # -flto, -fno-semantic-interposition and -falign-functions=64 were measured and
            # do not pay (the per-op rows' wall time did not move).
            extra_compile_args=["-O2", "-g1", "-std=c++17", "-Wno-unused-parameter", "-fvisibility=hidden"],
        )
    ],
    cmdclass={"build_ext": UnityBuildExtension.with_options(use_ninja=True)},
)
