"""ALU operators and activation functions, shared by ``nki.language`` and ``nki.isa``.

In NKI the same object is a language function (``nl.add(x, y)``) and an ISA
operator argument (``nisa.tensor_tensor(..., op=nl.add)``); an :class:`Op`
carries the NumPy function both need and the engine that runs it by default.
"""
from __future__ import annotations

import math

import numpy as np


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float32])(x)


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class Op:
    """An operator: ``fn`` on fp32 NumPy arrays; ``reduce`` when it can reduce an axis."""

    def __init__(self, name: str, fn, arity: int, engine: str, reduce=None, bitvec: bool = False):
        self.name, self.fn, self.arity, self.engine = name, fn, arity, engine
        self.reduce, self.bitvec = reduce, bitvec
        self.language = None  # the nki.language function of the same name

    def __call__(self, *args, **kwargs):
        return self.language(*args, **kwargs)

    def __repr__(self) -> str:
        return f"nki.language.{self.name}"


def _binary(name, fn, reduce=None, bitvec=False):
    return Op(name, fn, 2, "vector", reduce, bitvec)


def _activation(name, fn):
    return Op(name, fn, 1, "scalar")



BINARY = {op.name: op for op in (
    _binary("add", np.add, np.add.reduce),
    _binary("subtract", np.subtract),
    _binary("multiply", np.multiply, np.multiply.reduce),
    _binary("divide", np.divide),
    _binary("maximum", np.maximum, np.maximum.reduce),
    _binary("minimum", np.minimum, np.minimum.reduce),
    _binary("abs_max", lambda x, y: np.maximum(np.abs(x), np.abs(y)),
            lambda a, axis: np.abs(a).max(axis=axis)),
    _binary("abs_min", lambda x, y: np.minimum(np.abs(x), np.abs(y)),
            lambda a, axis: np.abs(a).min(axis=axis)),
    Op("power", np.power, 2, "gpsimd"),
    _binary("equal", lambda x, y: np.equal(x, y).astype(np.float32)),
    _binary("not_equal", lambda x, y: np.not_equal(x, y).astype(np.float32)),
    _binary("less", lambda x, y: np.less(x, y).astype(np.float32)),
    _binary("less_equal", lambda x, y: np.less_equal(x, y).astype(np.float32)),
    _binary("greater", lambda x, y: np.greater(x, y).astype(np.float32)),
    _binary("greater_equal", lambda x, y: np.greater_equal(x, y).astype(np.float32)),
    _binary("fmod", np.fmod),
    _binary("mod", np.mod),
    _binary("logical_and", lambda x, y: np.logical_and(x, y).astype(np.float32)),
    _binary("logical_or", lambda x, y: np.logical_or(x, y).astype(np.float32)),
    _binary("logical_xor", lambda x, y: np.logical_xor(x, y).astype(np.float32)),
    _binary("bitwise_and", np.bitwise_and, np.bitwise_and.reduce, bitvec=True),
    _binary("bitwise_or", np.bitwise_or, np.bitwise_or.reduce, bitvec=True),
    _binary("bitwise_xor", np.bitwise_xor, np.bitwise_xor.reduce, bitvec=True),
    _binary("left_shift", np.left_shift, bitvec=True),
    _binary("right_shift", np.right_shift, bitvec=True),
)}

UNARY = {op.name: op for op in (
    _activation("exp", np.exp),
    _activation("log", np.log),
    _activation("sqrt", np.sqrt),
    _activation("rsqrt", lambda x: 1.0 / np.sqrt(x)),
    _activation("tanh", np.tanh),
    _activation("sigmoid", _sigmoid),
    _activation("relu", lambda x: np.maximum(x, 0.0)),
    _activation("gelu", _gelu),
    _activation("gelu_apprx_tanh", _gelu_tanh),
    _activation("gelu_apprx_sigmoid", lambda x: x * _sigmoid(1.702 * x)),
    _activation("silu", lambda x: x * _sigmoid(x)),
    _activation("softplus", lambda x: np.log1p(np.exp(x))),
    _activation("mish", lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    _activation("erf", _erf),
    _activation("sin", np.sin),
    _activation("cos", np.cos),
    _activation("tan", np.tan),
    _activation("arctan", np.arctan),
    _activation("square", np.square),
    _activation("reciprocal", lambda x: 1.0 / x),
    _activation("copy", lambda x: x),
    Op("abs", np.abs, 1, "vector"),
    Op("negative", np.negative, 1, "vector"),
    Op("sign", np.sign, 1, "vector"),
    Op("ceil", np.ceil, 1, "vector"),
    Op("floor", np.floor, 1, "vector"),
    Op("trunc", np.trunc, 1, "vector"),
    Op("logical_not", lambda x: np.logical_not(x).astype(np.float32), 1, "vector"),
    Op("invert", np.invert, 1, "vector", bitvec=True),
)}
