"""The atoms on the GPU: single PTX instructions as numba intrinsics (the map of them, and
their fragment layouts: ``atoms``' docstring).

Each atom is one instruction emitted through an llvmlite inline-asm intrinsic
(``numba.cuda.extending.intrinsic``, by way of ``inline``): it is inlined, costs no call,
and keeps its operands in registers. ``warp`` holds the atoms of a thread or a warp
(sm_80), ``hopper`` those of sm_90 (wgmma, mbarriers, the bulk tensor copies, clusters),
``memory`` the loads and stores of activations in float32 or bf16, typing-time overloads
with one specialisation per array dtype. The simulator runs the twins of
``atoms.simulator`` instead, which define the same names.
"""
from .. import ATOMS
from .hopper import *  # noqa: F403
from .memory import *  # noqa: F403
from .warp import *  # noqa: F403

__all__ = ATOMS     # the package's list (tests/test_kernels_mma.py: each one defined once)
