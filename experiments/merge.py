"""Merge the rows of a newer run into a committed results CSV.

``python -m experiments.merge NEW OLD [--impl NAME ...] [--mode MODE ...]``

Each row of ``NEW`` (a CSV of :mod:`experiments.run`) replaces the row of ``OLD`` with the same
key (:data:`experiments.results_csv.KEY_COLUMNS` as the harness compares them, and the metric: a
sweep may record several per key) in place, and rows whose key ``OLD`` lacks are appended;
``OLD``'s other rows are kept as they are, each with its own provenance columns (git SHA,
date, versions).  ``--impl`` / ``--mode`` take only those rows of ``NEW``.  Prints what it
replaced and added.  This is how a partial re-run (``experiments.run --impl ... --dim ...``)
updates a committed table without re-measuring its baselines.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from experiments.results_csv import COLUMNS, rewrite
from experiments.results_csv import key as run_key


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != COLUMNS:
            raise SystemExit(f"error: {path} does not have the columns experiments.run writes")
        return list(reader)


def _key(row: dict[str, str]) -> tuple:
    """The harness's key of a row (numbers as numbers: "1" and "1.0" are the same gamma), and
    its metric."""
    return (*run_key(row), row["metric"])


def merge(
    new: Path, old: Path, impls: list[str] | None = None, modes: list[str] | None = None
) -> tuple[int, int]:
    """Merge ``new``'s rows (those of ``impls`` and ``modes`` if given) into ``old``, rewritten
    in one step (a crash leaves the old file or the new one); returns (rows replaced, rows
    added)."""
    rows = _read(old)
    index = {_key(r): k for k, r in enumerate(rows)}
    replaced = added = 0
    for r in _read(new):
        if (impls and r["impl"] not in impls) or (modes and r["mode"] not in modes):
            continue
        k = index.get(_key(r))
        if k is None:
            index[_key(r)] = len(rows)
            rows.append(r)
            added += 1
        else:
            rows[k] = r
            replaced += 1
    rewrite(old, rows)  # (CRLF, as the harness writes)
    return replaced, added


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("new", type=Path, help="the newer run's CSV")
    parser.add_argument("old", type=Path, help="the CSV to update (rewritten in place)")
    parser.add_argument("--impl", action="append", help="only this implementation's rows")
    parser.add_argument("--mode", action="append", help="only this mode's rows")
    args = parser.parse_args(argv)
    replaced, added = merge(args.new, args.old, args.impl, args.mode)
    print(f"{args.old}: {replaced} rows replaced, {added} added from {args.new}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
