"""The reproduction report: ``python -m paper.make_report`` writes ``paper/REPRODUCTION.md``
from the committed CSVs (read by :mod:`experiments.load`); :mod:`paper.make_report` lists the
package's modules by role."""
