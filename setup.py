"""Builds the small C++ core (`torch_neuronx._C`) with PyTorch's cpp_extension."""
import glob
import os

# Building must not autoload a previously installed (maybe half-built) backend.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

setup(
    ext_modules=[
        CppExtension(
            name="torch_neuronx._C",
            sources=sorted(glob.glob(os.path.join("torch_neuronx", "csrc", "*.cpp"))),
            extra_compile_args=["-O2", "-std=c++17", "-Wno-unused-parameter"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
