"""The harness's results CSV: its columns, its keys, appending rows that survive a crash, and
reading a file back for ``--resume``.

Long format, one row per measurement and metric: :data:`MEASURE_COLUMNS` then
:data:`PROVENANCE_COLUMNS`; a measurement is identified by its key (:data:`KEY_COLUMNS`) and
may write several rows, one per metric.

Crash safety
------------
:class:`Appender` writes each measurement's rows (and, in a new file, the header before them)
with one ``write`` and ``fsync``: a crash leaves at most the last measurement torn, and every
row ends with a line end (the harness writes CRLF; LF is read too), so a torn row is the last
line, without its line end (even where the cut leaves all of its fields).

:func:`load_for_resume` reads a file back for ``--resume``: it drops torn or malformed rows,
duplicates, measurements that lack rows (the caller says how many each one needs) and, unless
told not to, those that ended in status ``error``; it rewrites the file without them (write to
a temporary file, ``fsync``, rename) and says what it dropped, so that the rows appended next
start on a line of their own.
"""

from __future__ import annotations

import csv
import io
import numbers
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "BACK_TO_BACK",
    "COLUMNS",
    "KEY_COLUMNS",
    "MEASURE_COLUMNS",
    "METRIC",
    "PROVENANCE_COLUMNS",
    "Appender",
    "Resumed",
    "check_writable",
    "describe",
    "key",
    "load_for_resume",
    "rewrite",
]

MEASURE_COLUMNS = (
    "sweep impl mode B N M D gamma dtype device metric median p20 p80 repeats peak_mem_bytes "
    "predicted_mem_bytes launches rel_err_value rel_err_grad_x rel_err_grad_y reference "
    "status note"
).split()
PROVENANCE_COLUMNS = (
    "gpu driver cuda torch numba numba_cuda numpy python git_sha git_dirty date_utc host cpu"
).split()
COLUMNS = MEASURE_COLUMNS + PROVENANCE_COLUMNS
KEY_COLUMNS = ("impl", "mode", "B", "N", "M", "D", "gamma", "dtype")
METRIC = "time_ms"
#: Metric of a sweep's back-to-back timing (:func:`experiments.timing.back_to_back`).
BACK_TO_BACK = "time_ms_back_to_back"
#: What ends every row the harness writes (the csv module's default).
EOL = "\r\n"

Key = tuple[str, str, int, int, int, int, float, str]
Row = dict[str, object]


def key(row: dict) -> Key:
    """The measurement ``row`` belongs to (numbers as numbers: "1" and "1.0" are one gamma);
    ``ValueError`` if a key cell is not what the harness writes."""
    impl, mode, B, N, M, D, gamma, dtype = (row[c] for c in KEY_COLUMNS)
    return (str(impl), str(mode), int(B), int(N), int(M), int(D), float(gamma), str(dtype))


def describe(k: Key) -> str:
    """A key as one short phrase: ``torch forward B=2 N=8 M=8 D=1 gamma=1 float32``."""
    impl, mode, B, N, M, D, gamma, dtype = k
    return f"{impl} {mode} B={B} N={N} M={M} D={D} gamma={gamma:g} {dtype}"


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return f"{float(value):.6g}"  # (NumPy's floats too)
    return value


def _encode(rows: Iterable[Row], header: bool) -> bytes:
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator=EOL)
    if header:
        writer.writeheader()
    for row in rows:
        writer.writerow({c: _cell(row.get(c)) for c in COLUMNS})
    return buffer.getvalue().encode()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Appender:
    """Appends measurements to ``path``, each one's rows in one ``write`` and ``fsync``.

    Parameters
    ----------
    path : Path
        The CSV; its folder must exist (:func:`check_writable`).
    append : bool
        Keep the file and append to it (it must have the header: :func:`load_for_resume`);
        ``False``: replace it, at the first measurement (an earlier file stays whole until
        then).
    """

    def __init__(self, path: Path, append: bool) -> None:
        self.path, self.append = path, append
        self.fd: int | None = None
        self.rows = 0

    def write(self, rows: list[Row]) -> None:
        """Append one measurement's rows; durable when this returns."""
        header = False
        if self.fd is None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            if not (self.append and self.path.exists()):
                flags |= os.O_TRUNC
                header = True
            self.fd = os.open(self.path, flags, 0o644)
        _write_all(self.fd, _encode(rows, header))
        os.fsync(self.fd)
        self.rows += len(rows)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def rewrite(path: Path, rows: list[dict]) -> None:
    """Replace ``path`` by the header and ``rows`` in one step: a temporary file in the same
    folder, ``fsync``, then rename, so that a crash leaves the old file or the new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        _write_all(fd, _encode(rows, header=True))
        os.fsync(fd)
        os.close(fd)
        fd = -1
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if fd >= 0:
            os.close(fd)
        if os.path.exists(tmp):
            os.unlink(tmp)
    try:
        folder = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(folder)  # the rename itself, on file systems that need it
    except OSError:
        pass
    finally:
        os.close(folder)


def check_writable(path: Path) -> None:
    """Make sure that ``path`` can be written, before anything is measured: create its
    folder, open the file for appending if it exists (nothing is changed), else create and
    remove a file beside it.  Raises ``OSError`` (the operating system's message) if not."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        return
    fd, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".probe")
    os.close(fd)
    os.unlink(probe)


@dataclass
class Resumed:
    """A CSV read back for ``--resume`` (:func:`load_for_resume`).

    Attributes
    ----------
    done : set of Key
        The measurements complete in the file, to be skipped.
    dropped : list of str
        One line per row or measurement taken out of the file, saying why.
    retried : list of Key
        Measurements that ended in status ``error``, taken out to be measured again.
    rewritten : bool
        Whether the file was rewritten without them.
    """

    done: set[Key] = field(default_factory=set)
    dropped: list[str] = field(default_factory=list)
    retried: list[Key] = field(default_factory=list)
    rewritten: bool = False


def _rows(lines: list[str]) -> tuple[list[tuple[int, list[str]]], list[str]]:
    """The complete rows among ``lines`` (the file split at LF, the header first) as (line
    number, fields), and why each other line was left out."""
    torn = lines.pop()  # after the last LF: empty unless the last row is torn
    out, dropped = [], []
    for n, line in enumerate(lines[1:], start=2):
        line = line.removesuffix("\r")
        fields = next(csv.reader([line]), [])
        if "\0" in line or len(fields) != len(COLUMNS):
            what = f"{len(fields)} fields, not {len(COLUMNS)}" if "\0" not in line else "NUL"
            dropped.append(f"line {n}: malformed row ({what}): {line[:60]!r}")
        else:
            out.append((n, fields))
    if torn:
        n = len(lines) + 1
        dropped.append(f"line {n}: torn last row, without its line end: {torn[:60]!r}")
    return out, dropped


def load_for_resume(
    path: Path, complete: Callable[[list[dict]], bool], *, retry_errors: bool = True
) -> Resumed:
    """Read ``path`` back for ``--resume``, rewriting it without what cannot be kept.

    Parameters
    ----------
    path : Path
        The CSV (absent: nothing done).
    complete : callable
        ``complete(rows) -> bool``: whether the rows of one measurement (one key, distinct
        metrics) are all of them.
    retry_errors : bool
        Take out the measurements that ended in status ``error``, to be measured again.

    Returns
    -------
    Resumed
        What is done, and what was dropped and why.

    Raises
    ------
    SystemExit
        If the file has another header than this harness writes (not a torn one).
    """
    state = Resumed()
    if not path.exists():
        return state
    text = path.read_bytes().decode(errors="replace")
    header = ",".join(COLUMNS)
    lines = text.split("\n")
    if len(lines) < 2 or lines[0].removesuffix("\r") != header:
        if (header + EOL).startswith(text):  # torn while the header was written
            state.dropped.append(f"a torn header ({len(text)} bytes)")
            rewrite(path, [])
            state.rewritten = True
            return state
        raise SystemExit(
            f"error: {path} has other columns than this harness writes; move it away or run "
            "without --resume"
        )
    rows, state.dropped = _rows(lines)
    by_key: dict[Key, dict[str, tuple[int, dict]]] = {}
    for n, fields in rows:
        row = dict(zip(COLUMNS, fields, strict=True))
        try:
            k = key(row)
        except ValueError as exc:
            state.dropped.append(f"line {n}: unreadable key ({exc}): {','.join(fields)[:60]!r}")
            continue
        metrics = by_key.setdefault(k, {})
        if row["metric"] in metrics:
            state.dropped.append(
                f"line {metrics[row['metric']][0]}: {describe(k)} {row['metric']}: "
                f"an earlier copy of line {n}"
            )
        metrics[row["metric"]] = (n, row)
    kept = []
    for k, metrics in by_key.items():
        rows = [row for _, row in sorted(metrics.values(), key=lambda item: item[0])]
        if retry_errors and any(row["status"] == "error" for row in rows):
            state.retried.append(k)
            continue
        if not complete(rows):
            state.dropped.append(f"{describe(k)}: incomplete ({len(rows)} rows), measured again")
            continue
        state.done.add(k)
        kept += [(n, row) for n, row in sorted(metrics.values(), key=lambda item: item[0])]
    if state.dropped or state.retried:
        rewrite(path, [row for _, row in sorted(kept, key=lambda item: item[0])])
        state.rewritten = True
    return state
