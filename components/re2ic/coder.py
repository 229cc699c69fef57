"""Exact binary arithmetic coder (Witten-Neal-Cleary, 32-bit integer state) and the
discretised-Laplace frequency tables the codec uses.

Written here (no extra dependency) so that the rate we report is the length of a real
bitstream that a separate decoder turns back into the very same integers.
"""
from __future__ import annotations

import bisect
import math

import numpy as np

_BITS = 32
_FULL = (1 << _BITS) - 1
_HALF = 1 << (_BITS - 1)
_QUARTER = 1 << (_BITS - 2)
TABLE_TOTAL = 1 << 16  # frequency resolution; must stay <= 2**(_BITS - 2)


def laplace_cdf_table(scale: float, max_abs: int) -> list[int]:
    """Cumulative integer frequencies of a zero-mean Laplace discretised to the integers
    -max_abs..max_abs (tails folded into the end bins). Every symbol gets frequency >= 1,
    so any integer in range is codable even where the model is badly wrong."""
    ks = np.arange(-max_abs, max_abs + 1, dtype=np.float64)
    upper = _laplace_cdf(ks + 0.5, scale)
    lower = _laplace_cdf(ks - 0.5, scale)
    upper[-1], lower[0] = 1.0, 0.0
    probs = np.clip(upper - lower, 0.0, 1.0)
    n = len(ks)
    if n >= TABLE_TOTAL // 2:
        raise ValueError(f"alphabet of {n} symbols is too large for the frequency table")
    freqs = 1 + np.floor(probs * (TABLE_TOTAL - n)).astype(np.int64)
    return [0] + np.cumsum(freqs).tolist()


def _laplace_cdf(x: np.ndarray, scale: float) -> np.ndarray:
    return np.where(x < 0, 0.5 * np.exp(x / scale), 1.0 - 0.5 * np.exp(-x / scale))


class ArithmeticEncoder:
    def __init__(self) -> None:
        self.low, self.high, self.pending = 0, _FULL, 0
        self.bits: list[int] = []

    def encode(self, symbol: int, cdf: list[int]) -> None:
        total = cdf[-1]
        span = self.high - self.low + 1
        self.high = self.low + span * cdf[symbol + 1] // total - 1
        self.low = self.low + span * cdf[symbol] // total
        while True:
            if self.high < _HALF:
                self._emit(0)
            elif self.low >= _HALF:
                self._emit(1)
                self.low -= _HALF
                self.high -= _HALF
            elif self.low >= _QUARTER and self.high < _HALF + _QUARTER:
                self.pending += 1
                self.low -= _QUARTER
                self.high -= _QUARTER
            else:
                break
            self.low = 2 * self.low
            self.high = 2 * self.high + 1

    def _emit(self, bit: int) -> None:
        self.bits.append(bit)
        self.bits.extend([1 - bit] * self.pending)
        self.pending = 0

    def finish(self) -> bytes:
        """Two final bits pin a value inside [low, high] when the decoder pads with zeros."""
        self.pending += 1
        self._emit(0 if self.low < _QUARTER else 1)
        return np.packbits(np.array(self.bits, dtype=np.uint8)).tobytes()


class ArithmeticDecoder:
    def __init__(self, data: bytes) -> None:
        self.bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8)).tolist()
        self.pos = 0
        self.low, self.high, self.value = 0, _FULL, 0
        for _ in range(_BITS):
            self.value = 2 * self.value + self._next_bit()

    def _next_bit(self) -> int:
        bit = self.bits[self.pos] if self.pos < len(self.bits) else 0
        self.pos += 1
        return bit

    def decode(self, cdf: list[int]) -> int:
        total = cdf[-1]
        span = self.high - self.low + 1
        count = ((self.value - self.low + 1) * total - 1) // span
        symbol = bisect.bisect_right(cdf, count) - 1
        self.high = self.low + span * cdf[symbol + 1] // total - 1
        self.low = self.low + span * cdf[symbol] // total
        while True:
            if self.high < _HALF:
                pass
            elif self.low >= _HALF:
                self.low -= _HALF
                self.high -= _HALF
                self.value -= _HALF
            elif self.low >= _QUARTER and self.high < _HALF + _QUARTER:
                self.low -= _QUARTER
                self.high -= _QUARTER
                self.value -= _QUARTER
            else:
                break
            self.low = 2 * self.low
            self.high = 2 * self.high + 1
            self.value = 2 * self.value + self._next_bit()
        return symbol


def encode_ints(encoder: ArithmeticEncoder, values: np.ndarray, scale: float, max_abs: int) -> None:
    cdf = laplace_cdf_table(scale, max_abs)
    for v in np.asarray(values, dtype=np.int64).ravel().tolist():
        encoder.encode(v + max_abs, cdf)


def decode_ints(decoder: ArithmeticDecoder, count: int, scale: float, max_abs: int) -> np.ndarray:
    cdf = laplace_cdf_table(scale, max_abs)
    return np.array([decoder.decode(cdf) - max_abs for _ in range(count)], dtype=np.int64)


def quantise_log2_scale(scale: float) -> int:
    """Scales travel in the header as log2 in 1/16 steps (int16)."""
    return int(np.clip(round(16 * math.log2(max(scale, 1e-3))), -32768, 32767))


def scale_from_code(code: int) -> float:
    return 2.0 ** (code / 16)


def ideal_bits(values: np.ndarray, scale: float, max_abs: int) -> float:
    """-log2 p of the integers under the same table (what an ideal coder would spend)."""
    cdf = np.array(laplace_cdf_table(scale, max_abs), dtype=np.float64)
    idx = np.asarray(values, dtype=np.int64).ravel() + max_abs
    return float(-np.log2((cdf[idx + 1] - cdf[idx]) / cdf[-1]).sum())
