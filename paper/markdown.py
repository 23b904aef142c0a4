"""Numbers as the report writes them, and its Markdown: one spelling of each kind of number
(ms, MiB, errors, ratios, ranges) and the table writer."""

# The text is typeset: γ, ×, –, − and ≤ are meant, not look-alikes of ASCII.
# ruff: noqa: RUF001

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from experiments.load import fmt_sig

__all__ = [
    "DASH",
    "capital",
    "fmt_count",
    "fmt_err",
    "fmt_g",
    "fmt_gammas",
    "fmt_mib",
    "fmt_ms",
    "fmt_objective",
    "fmt_pair",
    "fmt_pct",
    "fmt_ratio",
    "fmt_span",
    "fmt_span_or",
    "fmt_times",
    "fmt_x",
    "indent",
    "md_table",
]


DASH = "—"


def fmt_ms(x: float | None) -> str:
    return DASH if x is None else fmt_sig(x, 3)


def fmt_mib(x: float | None) -> str:
    return DASH if x is None else fmt_sig(x, 3)


def fmt_err(x: float | None) -> str:
    if x is None:
        return DASH
    if not math.isfinite(x):
        return "non-finite"
    return f"{x:.1e}"


def fmt_ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return DASH
    return f"{fmt_sig(a / b, 2)}×"


def fmt_pct(x: float) -> str:
    return f"{x:.0f}"


def fmt_times(x: float) -> str:
    return fmt_sig(x, 2)


def fmt_g(x: float) -> str:
    """``x`` as ``:g`` writes it, with a short exponent (``1e-5``, not ``1e-05``)."""
    mantissa, _, exponent = f"{x:g}".partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else mantissa


def fmt_x(x: float) -> str:
    return f"{fmt_times(x)}×"


def fmt_span(values: Sequence[float], fmt: Callable[[float], str], unit: str = "") -> str:
    """``lo–hi unit`` of ``values`` formatted by ``fmt`` (one value if they agree)."""
    lo, hi = fmt(min(values)), fmt(max(values))
    if lo == hi:
        return f"{lo}{unit}"
    dash = " to " if min(values) < 0 else "–"
    return f"{lo}{dash}{hi}{unit}"


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    """A Markdown table; ``align`` has one ``l`` or ``r`` per column (default ``l``)."""
    marks = ["---:" if a == "r" else "---" for a in align.ljust(len(header), "l")]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def fmt_gammas(values: Sequence[float]) -> str:
    return ", ".join(f"{g:g}" for g in values)


def fmt_span_or(values: Sequence[float], fmt: Callable[[float], str], unit: str = "") -> str:
    return fmt_span(values, fmt, unit) if values else DASH


def fmt_count(x: float) -> str:
    return f"{x:.0f}"


def fmt_objective(x: float) -> str:
    return fmt_sig(x, 4)


def capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def fmt_pair(a: str, b: str) -> str:
    """``a / b``, or one word when both cells say the same non-number."""
    return a if a == b and not a[:1].isdigit() else f"{a} / {b}"


def indent(text: str) -> str:
    return "\n".join(("  " + line) if line else line for line in text.splitlines())
