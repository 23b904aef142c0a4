"""``python -m experiments`` is ``python -m experiments.run``."""

from __future__ import annotations

from experiments.run import main

raise SystemExit(main())
