"""Absolute encodings acting on the input embeddings.

Every scheme here computes a table ``P(pos)`` of shape (B', T, Dp) and combines it with the token
embeddings, by addition (Dp = D) or by concatenation followed by a linear projection back to D.
Subclasses implement only :meth:`AbsoluteEncoding.table`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from posenc._numerics import out_dtype, work_dtype
from posenc.base import PosencError, PositionalEncoding, SchemeMeta, as_batched, check_max_len

Integration = Literal["add", "concat"]


def sinusoidal_table(pos: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """Vaswani et al. (2017) table: PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(·).

    Args:
        pos: positions of any shape S (integer or float).
        dim: table width d (even).
        base: wavelength base.

    Returns:
        Tensor of shape S + (dim,), in float32 (or float64 when ``pos`` is float64). The angles
        and their sines are formed in float64 (:func:`~posenc._numerics.work_dtype`) and only the
        result is cast: float32 angles put the table off by up to 0.15 at 4.6·10⁶ (d = 64).
    """
    if dim % 2:
        raise PosencError(f"sinusoidal table needs an even width, got {dim}")
    work = work_dtype(pos.device)
    with torch.autocast(device_type=pos.device.type, enabled=False):
        i = torch.arange(dim // 2, device=pos.device, dtype=work)
        inv_freq = base ** (-2.0 * i / dim)  # (d/2,)
        angles = pos.to(work)[..., None] * inv_freq  # S + (d/2,)
        out = torch.stack((angles.sin(), angles.cos()), dim=-1)  # S + (d/2, 2)
        return out.flatten(-2).to(out_dtype(pos))  # S + (d,)


class AbsoluteEncoding(PositionalEncoding):
    """Base for input-side tables P(pos), added to or concatenated with the embeddings.

    Args:
        d_model: model width D.
        n_heads: number of heads (unused by absolute schemes, kept for the common signature).
        integration: ``add`` (x + P) or ``concat`` (Linear([x, P]) back to D).
        table_dim: width of P when concatenating (defaults to D).
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("input",))
    abstract: ClassVar[bool] = True  # a family base, not a scheme

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        integration: Integration = "add",
        table_dim: int | None = None,
    ) -> None:
        super().__init__(d_model, n_heads)
        if integration not in ("add", "concat"):
            raise PosencError(f"integration must be 'add' or 'concat', got {integration!r}")
        if integration == "add" and table_dim not in (None, d_model):
            raise PosencError(f"integration='add' needs table_dim == d_model ({d_model}), got {table_dim}")
        self.integration = integration
        self.table_dim = table_dim or d_model
        self.proj = nn.Linear(d_model + self.table_dim, d_model) if integration == "concat" else None

    def table(self, pos: Tensor) -> Tensor:
        """The position table for ``pos`` (B', T) as (B', T, table_dim)."""
        raise NotImplementedError

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        p = self.table(as_batched(pos)).to(x.dtype)  # (B', T, Dp)
        if self.proj is None:
            return x + p
        p = p.expand(x.shape[0], -1, -1)  # (B, T, Dp)
        return self.proj(torch.cat((x, p), dim=-1))  # (B, T, D)


class Sinusoidal(AbsoluteEncoding):
    """Fixed sinusoids, "Attention Is All You Need" (Vaswani et al., 2017), Section 3.5.

    Defined for any real position, so it accepts float timestamps and any test length.

    Args:
        base: wavelength base (10000 in the paper).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        base: float = 10000.0,
        integration: Integration = "add",
        table_dim: int | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, integration=integration, table_dim=table_dim)
        if base <= 1:
            raise PosencError(f"Sinusoidal base must be > 1, got {base}")
        self.base = base

    def table(self, pos: Tensor) -> Tensor:
        return sinusoidal_table(pos, self.table_dim, self.base)


class Learned(AbsoluteEncoding):
    """A learned vector per position (BERT, GPT-2; Gehring et al., 2017, "Convolutional Sequence
    to Sequence Learning").

    Undefined at positions ``>= max_len``: asking for one raises
    :class:`~posenc.base.PositionOutOfRange` naming both numbers — unless ``clamp``: then every
    position ``>= max_len`` reads the last row (the common practice source 000 calls a catastrophic
    failure: all positions past the table look alike), and the scheme is defined everywhere.

    Args:
        max_len: number of positions in the table.
        init_std: standard deviation of the normal initialisation.
        clamp: read positions past the table from its last row instead of raising.
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("input",), extrapolates=False)

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        max_len: int = 1024,
        init_std: float = 0.02,
        integration: Integration = "add",
        table_dim: int | None = None,
        clamp: bool = False,
    ) -> None:
        super().__init__(d_model, n_heads, integration=integration, table_dim=table_dim)
        max_len = check_max_len("Learned", max_len)
        self.rows, self.clamp = max_len, bool(clamp)
        self.max_len = None if self.clamp else max_len  # clamped: defined at every position
        self.weight = nn.Parameter(torch.randn(max_len, self.table_dim) * init_std)

    def table(self, pos: Tensor) -> Tensor:
        if pos.is_floating_point() and not torch.equal(pos, pos.round()):
            raise PosencError("Learned positional encoding needs integer positions")
        if self.clamp:
            lo = pos.min().item() if pos.numel() else 0
            if lo < 0:
                raise PosencError(f"Learned positional encoding needs positions >= 0, got {lo:g}")
            pos = pos.clamp(max=self.rows - 1)  # before the cast: float64 positions past 2^63 stay safe
        self.check_positions(pos)
        return self.weight[pos.long()]  # (B', T, Dp)
