"""Kubernetes resource quantities (`10Gi`, `500M`, `1.5e3`), exact, for comparing storage sizes."""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIX = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity into an exact number; raises ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Fraction(str(value))
    text = str(value).strip()
    m = _QUANTITY.match(text)
    if not m or m.group(1) in {".", "+", "-"}:
        raise ValueError(f"not a quantity: {value!r}")
    number = Fraction(m.group(1))
    if m.group(2):
        return number * Fraction(10) ** int(m.group(2)[1:])
    return number * _SUFFIX[m.group(3) or ""]
