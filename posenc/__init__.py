"""posenc: pluggable positional encodings behind one interface.

Every scheme is a :class:`PositionalEncoding` with three hooks (``embed``, ``rotate``, ``bias``);
the class paths re-exported here are public API, since saved configs name them.
"""

# ruff: noqa: F401  (re-exports: __all__ is computed below, which ruff cannot read)
from types import ModuleType as _ModuleType

from posenc.absolute import AbsoluteEncoding, Learned, Sinusoidal, sinusoidal_table
from posenc.base import PUBLIC as _PUBLIC
from posenc.base import (
    PosencError,
    PositionalEncoding,
    PositionOutOfRange,
    SchemeMeta,
    as_batched,
    relative_distance,
)
from posenc.bias import ALiBi, BiasEncoding, alibi_slopes
from posenc.compose import Compose
from posenc.content import ConditionalLearnedPE, ConditionalPE, ConvPE
from posenc.discrete import Binary, GrayCode, Integer
from posenc.kernel_bias import GaussianPrior, Kerple
from posenc.learned_bias import FIRE, DynamicBias, T5Bias, t5_relative_bucket
from posenc.periods import periods_from_data
from posenc.positions import RandomizedPositions, sample_positions
from posenc.registry import all_schemes, build_encoding, scheme_table
from posenc.relative import DeBERTa, ShawRelative, TransformerXL
from posenc.rope_scaling import RopeScaling, register_scaling
from posenc.rotary import RoPE, apply_rotation, rope_angles, rope_inv_freq
from posenc.rotary_variants import PeriodicRoPE, XPos
from posenc.spectral import (
    ComplexExponential,
    GaussianRBF,
    Hybrid,
    RandomFourier,
    SinusoidalOffset,
    TrainableSinusoidal,
)

__all__ = sorted(  # every public name above except the submodules themselves
    name for name, obj in dict(globals()).items()
    if not name.startswith("_") and not isinstance(obj, _ModuleType)
)
_PUBLIC.update({name: obj for name in __all__ if isinstance(obj := globals()[name], type)})
