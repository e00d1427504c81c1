"""Dominant periods of a series, to choose :class:`~posenc.PeriodicRoPE` periods from data.

The estimate is the peak list of a Hann-windowed, zero-padded periodogram, refined by parabolic
interpolation of the log power around each peak. DNA is handled as in "Prediction of
probable genes by Fourier analysis of genomic sequences" (Tiwari, Ramachandran, Bhattacharya,
Bhattacharya and Ramaswamy, 1997): one 0/1 indicator series per base, their spectra summed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from posenc.base import PosencError

LOBE_BINS = 4.0  # peaks closer than this many 1/N bins to a stronger one belong to its lobe


def as_signals(x: Any, codes: Sequence[int] | None = None) -> np.ndarray:
    """Mean-removed float64 channels (C, N): the series itself, or one indicator per code."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise PosencError(f"periods_from_data needs a 1-D series, got shape {arr.shape}")
    if arr.shape[0] < 8:
        raise PosencError(f"periods_from_data needs at least 8 values, got {arr.shape[0]}")
    if codes is None:
        if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
            raise PosencError(f"periods_from_data needs real numbers, got dtype {arr.dtype}")
        sig = arr.astype(np.float64)[None, :]  # (1, N)
    else:
        sig = np.stack([(arr == c).astype(np.float64) for c in codes])  # (C, N)
    if not np.isfinite(sig).all():
        raise PosencError("periods_from_data got NaN or infinite values; fill or drop them first")
    return sig - sig.mean(axis=1, keepdims=True)


def fft_length(n: int) -> int:
    """Zero-padded FFT length: 4× the series (finer frequency grid) up to 2^22 points."""
    target = 4 * n if n <= 2**20 else n
    return 1 << (target - 1).bit_length()


def periodogram(signals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Frequencies (cycles per sample) and power summed over channels, Hann window, zero-padded."""
    n = signals.shape[1]
    nfft = fft_length(n)
    spectrum = np.fft.rfft(signals * np.hanning(n), n=nfft, axis=1)  # (C, nfft/2 + 1)
    power = (np.abs(spectrum) ** 2).sum(axis=0)  # (nfft/2 + 1,)
    return np.fft.rfftfreq(nfft), power


def refine_peak(power: np.ndarray, k: int) -> tuple[float, float]:
    """Fractional bin and log power of the parabola through log power at k−1, k, k+1."""
    a, b, c = np.log(power[k - 1 : k + 2] + 1e-300)
    den = a - 2.0 * b + c
    delta = 0.5 * (a - c) / den if den < 0 else 0.0
    return k + delta, b - 0.25 * (a - c) * delta


def spectral_peaks(freqs: np.ndarray, power: np.ndarray, band: tuple[float, float], lobe: float,
                   top_k: int) -> list[tuple[float, float]]:
    """Up to ``top_k`` (frequency, log power) peaks inside ``band``, strongest first.

    Local maxima are taken in decreasing power; one within ``lobe`` (cycles per sample) of an
    already accepted peak is part of that peak's lobe (or a sidelobe) and skipped.
    """
    k = np.arange(1, len(power) - 1)
    is_max = (power[k] > power[k - 1]) & (power[k] >= power[k + 1]) & (power[k] > 0)
    is_max &= (freqs[k] >= band[0]) & (freqs[k] <= band[1])
    step = freqs[1]
    accepted: list[tuple[float, float]] = []
    for idx in k[is_max][np.argsort(-power[k[is_max]], kind="stable")]:
        bin_, strength = refine_peak(power, int(idx))
        f = bin_ * step
        if all(abs(f - g) > lobe for g, _ in accepted):
            accepted.append((f, strength))
        if len(accepted) == top_k:
            break
    return sorted(accepted, key=lambda fs: -fs[1])


def periods_from_data(
    x: Any,
    *,
    max_period: float | None = None,
    min_period: float = 2.0,
    top_k: int = 3,
    codes: Sequence[int] | None = None,
) -> list[float]:
    """Dominant periods of a 1-D series, strongest first (at most ``top_k``; fewer if the
    spectrum has fewer peaks, none for a constant series).

    Args:
        x: a 1-D numeric series (array, list or tensor), or integer codes when ``codes`` is given.
        max_period: longest period considered (default: half the series, i.e. ≥ 2 cycles seen).
        min_period: shortest period considered (2 = Nyquist).
        top_k: how many periods to return.
        codes: treat ``x`` as categorical codes and sum the spectra of one indicator series per
            listed code, e.g. ``(0, 1, 2, 3)`` for A, C, G, T as the DNA tasks encode bases (N left out).

    Returns:
        Periods in samples (positions), as floats, sorted by spectral power.

    Example:
        >>> t = np.arange(48 * 7 * 8)
        >>> periods_from_data(np.sin(2 * np.pi * t / 48) + np.sin(2 * np.pi * t / 336), top_k=2)
        [48.0..., 336.0...]
    """
    signals = as_signals(x, codes)
    n = signals.shape[1]
    max_period = n / 2 if max_period is None else float(max_period)
    if not 2.0 <= min_period < max_period:
        raise PosencError(
            f"periods_from_data needs 2 <= min_period < max_period, got {min_period} and {max_period}"
        )
    if int(top_k) != top_k or top_k < 1:
        raise PosencError(f"periods_from_data top_k must be a positive integer, got {top_k!r}")
    freqs, power = periodogram(signals)
    peaks = spectral_peaks(freqs, power, (1.0 / max_period, 1.0 / min_period), LOBE_BINS / n, int(top_k))
    return [float(1.0 / f) for f, _ in peaks]
