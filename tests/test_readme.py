"""The README's Python snippets run as written (issue 52): each ```python block is executed on
its own, on whatever this machine has (the snippets take ``"cuda"`` only where torch sees a GPU;
in CI, the CPU)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
#: the README's limit, in lines
MAX_LINES = 250


def _snippets() -> list[tuple[str, str]]:
    """(the section's heading, the code) of each ```python block, in order."""
    found, section = [], "top"
    parts = re.split(r"(^## [^\n]*$|^```python\n.*?^```$)", README.read_text(), flags=re.M | re.S)
    for part in parts:
        if part.startswith("## "):
            section = part[3:].strip()
        elif part.startswith("```python"):
            found.append((section, part.removeprefix("```python\n").removesuffix("```")))
    return found


SNIPPETS = _snippets()


def test_readme_has_its_snippets_and_length():
    assert [s for s, _ in SNIPPETS] == ["Use", "Barycenters", "All pairs, exact DTW, Soft-MSM"]
    assert len(README.read_text().splitlines()) <= MAX_LINES


@pytest.mark.parametrize("section, code", SNIPPETS, ids=[s for s, _ in SNIPPETS])
def test_readme_snippet_runs(section, code):
    exec(compile(code, f"README.md, {section}", "exec"), {"__name__": "readme_snippet"})
