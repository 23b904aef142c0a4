"""Read the committed benchmark CSVs: the one loader of the report (:mod:`paper`) and the
figures (:mod:`figures.make_figures`).

Standard library only (plus :mod:`experiments.sweeps` for the planned grids), so the report
can be regenerated and checked in the test environment, where pandas and matplotlib may be
absent.

A CSV cell is kept as the string the harness wrote.  :func:`num` turns it into a number:
``""`` (not measured, not applicable) is ``None``; ``"nan"`` / ``"inf"`` (a non-finite
result, e.g. a NaN gradient) are the float NaN / inf, so the two cases stay apart.

The ``barycenter`` sweep writes several metrics per (implementation, mode, configuration), one
row each (:mod:`experiments.barycenter`); :func:`measurement` gathers them.

Besides the sweeps, two CSV sets that only the figures draw: one CSV per fresh device process
under :data:`PROCESSES` (:meth:`Results.processes`) and the Triton gradient sizes
:data:`TC_GRAD_SIZES` (:meth:`Results.tc_grad_sizes`).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BARYCENTER",
    "BARYCENTER_MODES",
    "EARLY_STOP",
    "FORWARD_BACKWARD",
    "ITERATION",
    "NO_EARLY_STOP",
    "PROCESSES",
    "REPO",
    "RESULTS",
    "TC_GRAD_SIZES",
    "Measurement",
    "Point",
    "Results",
    "fmt_sig",
    "impl_order",
    "measurement",
    "not_ok",
    "num",
    "planned",
    "status_of",
]

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "experiments" / "results" / "nvidia-h200"
FORWARD_BACKWARD = "forward+backward"
SWEEP_FILES = ("paper-grid", "fig1-length", "fig1-dim", "gamma", "long")
BARYCENTER = "barycenter"
#: Sweeps whose CSV may be absent: loaded when present, left out of ``Results.sweeps`` otherwise.
OPTIONAL_FILES = (BARYCENTER, "lengths", "memory")
# The barycenter sweep's modes, as the CSV spells them (experiments.barycenter.MODES).
ITERATION = "barycenter-adam"
EARLY_STOP = "barycenter-adam-early-stop"
NO_EARLY_STOP = "barycenter-adam-max-iter"
BARYCENTER_MODES = (ITERATION, EARLY_STOP, NO_EARLY_STOP)
#: Folder of one ``<date>-process<P>.csv`` per fresh device process (the eager N = 512 step
#: of issue 3), inside a results folder: ``<date>`` the day measured (``YYYY-MM-DD``), ``<P>``
#: the process's place in that day (1, 2, ...); the GPU, commit and time are in the rows.
PROCESSES = "targets-processes"
#: The Triton gradients' timings against D, inside a results folder.
TC_GRAD_SIZES = "tc-grads-align/gradsizes.csv"

Row = dict[str, str]


def num(cell: str | None) -> float | None:
    """A CSV cell as a float: ``None`` when empty, NaN / inf kept as such."""
    if cell is None or cell.strip() == "":
        return None
    return float(cell)


def fmt_sig(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` significant digits, never in exponent notation above 1."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


@dataclass(frozen=True)
class Point:
    """A planned measurement: implementation and configuration (forward + backward)."""

    impl: str
    B: int
    N: int
    M: int
    D: int
    gamma: float


class Results:
    """The CSVs of one results folder, one list of rows per sweep (absent files: empty; absent
    optional files, e.g. ``barycenter.csv``: no entry in :attr:`sweeps`).

    Parameters
    ----------
    folder : Path
        ``experiments/results/<machine>`` with ``<sweep>.csv`` files.
    """

    def __init__(self, folder: Path = RESULTS) -> None:
        self.folder = Path(folder)
        self.sweeps: dict[str, list[Row]] = {}
        for name in SWEEP_FILES + OPTIONAL_FILES:
            path = self.folder / f"{name}.csv"
            if path.exists():
                self.sweeps[name] = _read(path)
            elif name in SWEEP_FILES:
                self.sweeps[name] = []

    def rows(self, sweep: str, mode: str = FORWARD_BACKWARD, **where: object) -> list[Row]:
        """Rows of ``sweep`` in ``mode`` whose columns equal ``where`` (numbers compared as
        numbers)."""
        out = []
        for row in self.sweeps.get(sweep, []):
            if row["mode"] != mode:
                continue
            if all(_equal(row[column], value) for column, value in where.items()):
                out.append(row)
        return out

    def one(self, sweep: str, mode: str = FORWARD_BACKWARD, **where: object) -> Row | None:
        """The row matching ``where``, or ``None``; more than one match is an error."""
        found = self.rows(sweep, mode, **where)
        if len(found) > 1:
            raise ValueError(f"{len(found)} rows in {sweep} match {where}")
        return found[0] if found else None

    def value(self, sweep: str, column: str, **where: object) -> float | None:
        """``num(row[column])`` of the forward + backward row matching ``where`` if it is
        ``ok``; ``None`` otherwise."""
        row = self.one(sweep, **where)
        if row is None or row["status"] != "ok":
            return None
        return num(row[column])

    def provenance(self, sweep: str) -> dict[str, str]:
        """Distinct values of each provenance column in ``sweep``, joined by ``" / "``."""
        rows = self.sweeps.get(sweep, [])
        out = {}
        for column in (
            "gpu driver cuda torch numba numba_cuda numpy python git_sha git_dirty date_utc host"
        ).split():
            out[column] = " / ".join(sorted({r[column] for r in rows}))
        return out

    def processes(self) -> list[tuple[str, int, list[Row]]]:
        """(date, process, rows) of each ``<PROCESSES>/<date>-process<P>.csv``, in date then
        process order; empty when the folder is absent."""

        def key(path: Path) -> tuple[str, int]:
            date, process = path.stem.rsplit("-process", 1)
            return date, int(process)

        paths = sorted((self.folder / PROCESSES).glob("*-process*.csv"), key=key)
        return [(*key(path), _read(path)) for path in paths]

    def tc_grad_sizes(self) -> list[Row] | None:
        """The rows of ``<TC_GRAD_SIZES>``, in the file's (run) order; ``None`` when absent."""
        path = self.folder / TC_GRAD_SIZES
        return _read(path) if path.exists() else None


def _read(path: Path) -> list[Row]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _equal(cell: str, value: object) -> bool:
    if isinstance(value, str):
        return cell == value
    if isinstance(value, int | float):
        number = num(cell)
        return number is not None and math.isclose(number, float(value), rel_tol=1e-9)
    raise TypeError(f"cannot compare a CSV cell with {type(value).__name__}")


@dataclass(frozen=True)
class Measurement:
    """The rows of one (implementation, mode, configuration) of a sweep that writes one row
    per metric (``barycenter``).

    Attributes
    ----------
    status : str
        ``"ok"`` when every row is ``ok``; else the first other status, or ``"missing"``
        without a row (a failed measurement writes one row, under the mode's first metric).
    note : str
        The note of the row that gave the status (or why it is missing).
    device : str
        The ``device`` column ("cuda", "cpu"); empty when missing.
    values : dict
        ``metric -> num(median)`` of the rows, when ``ok``; empty otherwise.
    row : dict or None
        The first row (peak memory, launches), ``None`` when missing.
    """

    status: str
    note: str
    device: str
    values: dict[str, float | None]
    row: Row | None


def measurement(results: Results, sweep: str, impl: str, mode: str, **where: object) -> Measurement:
    """Every metric row of ``impl`` in ``mode`` matching ``where``, as one :class:`Measurement`."""
    rows = results.rows(sweep, mode, impl=impl, **where)
    if not rows:
        return Measurement("missing", "no row in the CSV", "", {}, None)
    for row in rows:
        if row["status"] != "ok":
            return Measurement(row["status"], row["note"], row["device"], {}, rows[0])
    values = {row["metric"]: num(row["median"]) for row in rows}
    return Measurement("ok", rows[0]["note"], rows[0]["device"], values, rows[0])


def planned(sweep: str) -> list[Point]:
    """Every point (implementation, configuration) that the harness plans for ``sweep`` on a
    GPU (:mod:`experiments.sweeps`, the one definition of the grids); measured forward +
    backward, or, for ``barycenter``, in each of :data:`BARYCENTER_MODES`."""
    from experiments.sweeps import SWEEPS

    spec = SWEEPS[sweep]
    return [
        Point(impl, c.B, c.N, c.M, c.D, c.gamma)
        for c in spec.grid("cuda", False)
        for impl in spec.impls
    ]


def status_of(results: Results, sweep: str, point: Point) -> tuple[str, str]:
    """(status, note) of a planned point: the CSV's status, or ``"missing"`` without a row."""
    row = results.one(
        sweep, impl=point.impl, B=point.B, N=point.N, M=point.M, D=point.D, gamma=point.gamma
    )
    if row is None:
        return "missing", "no row in the CSV (the run stopped before this point)"
    return row["status"], row["note"]


def not_ok(results: Results, sweep: str) -> list[tuple[Point, str, str]]:
    """Planned points of ``sweep`` without an ``ok`` measurement: (point, status, note)."""
    out = []
    for point in planned(sweep):
        status, note = status_of(results, sweep, point)
        if status != "ok":
            out.append((point, status, note))
    return out


def impl_order(names: Collection[str]) -> list[str]:
    """``names`` in the registry's order of :mod:`experiments.impls` (unknown ones last)."""
    from experiments.impls import IMPLS

    known = [n for n in IMPLS if n in names]
    return known + sorted(set(names) - set(known))
