"""How bytes and byte rates are written, everywhere: binary (IEC) units, powers of 1024.

Why binary: the numbers gpu-triage shows most are memory sizes, and the cards, the driver and
``nvidia-smi`` count memory in powers of two (an H200 is 141 GiB, 150.75 GB). One convention for sizes,
rates, recordings and the doctor means a number read in one place can be compared with the same number
elsewhere. Vendor link speeds (NVLink 25 GB/s per link, PCIe per lane) are quoted as the vendor states
them, in decimal GB/s, and say so where they appear.

Two spellings of the same convention:

- :func:`fmt_bytes` / :func:`fmt_rate`: ``"1.2 GiB"``, ``"340.0 MiB/s"``, for text meant to be read
  (the doctor, compare, record, diagnosis evidence);
- :func:`short_bytes`: ``"1.2G"``, ``"340M/s"``, the dashboard's narrow columns, where ``G`` is GiB.

A missing value (None or NaN) is ``"n/a"``, never 0.
"""

from __future__ import annotations

import math

_IEC: tuple[tuple[str, int], ...] = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def _missing(n: float | None) -> bool:
    return n is None or (isinstance(n, float) and math.isnan(n))


def fmt_bytes(n: float | None, *, per_s: bool = False, signed: bool = False, digits: int = 1) -> str:
    """``n`` bytes in the largest binary unit it reaches: 1288490188 -> "1.2 GiB"; None or NaN -> "n/a".

    ``per_s`` adds "/s"; ``signed`` puts "+" before a positive value (a change); ``digits`` after the point.
    """
    if n is None or _missing(n):
        return "n/a"
    suffix = "/s" if per_s else ""
    sign = "+" if signed and n > 0 else ""
    for unit, div in _IEC:
        if abs(n) >= div:
            return f"{sign}{n / div:.{digits}f} {unit}{suffix}"
    return f"{sign}{n:.0f} B{suffix}"


def fmt_rate(n: float | None, *, signed: bool = False, digits: int = 1) -> str:
    """Bytes per second: 1.5e9 -> "1.4 GiB/s"; None or NaN -> "n/a"."""
    return fmt_bytes(n, per_s=True, signed=signed, digits=digits)


def fmt_pct(v: float | None, width: int = 0) -> str:
    """A percentage as a whole number: 42.4 -> "42%"; None or NaN -> "n/a"; right-aligned in ``width`` cells
    where given (the panes' columns), as it comes where not (a table that pads its own cells)."""
    if v is None or _missing(v):
        return "n/a".rjust(width)
    return f"{v:.0f}%".rjust(width)


def short_bytes(n: float | None, *, suffix: str = "") -> str:
    """The dashboard's compact form of the same binary units: 1.2G, 340M, 12K (two significant figures
    below 10, whole numbers above); None or NaN -> "n/a", 0 -> "0"."""
    if n is None or _missing(n):
        return "n/a"
    for unit, div in _IEC:
        if abs(n) >= div:
            v = n / div
            return f"{v:.1f}{unit[0]}{suffix}" if v < 10 else f"{v:.0f}{unit[0]}{suffix}"
    return f"{n:.0f}B{suffix}" if n else f"0{suffix}"
