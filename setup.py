"""Builds the small C++ core (`torch_neuronx._C`) with PyTorch's cpp_extension."""
import glob
import os

# Building must not autoload a previously installed (maybe half-built) backend.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

CSRC = os.path.join("torch_neuronx", "csrc")

setup(
    ext_modules=[
        CppExtension(
            name="torch_neuronx._C",
            # csrc/{runtime,aten,aten/native,fidelity}: see csrc/README.md.
            sources=sorted(glob.glob(os.path.join(CSRC, "**", "*.cpp"), recursive=True)),
            include_dirs=[os.path.abspath(CSRC)],
            extra_compile_args=["-O2", "-std=c++17", "-Wno-unused-parameter"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
