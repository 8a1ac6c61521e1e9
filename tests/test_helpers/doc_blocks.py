"""The fenced code blocks a doc tells a user to type, extracted so a test runs them verbatim.

    python3 tests/test_helpers/doc_blocks.py README.md "Quick start 2" bash   # prints the block

`tables` reads a section's markdown tables the same way, for a test that holds a doc's table to the code.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def section(path: str | Path, heading: str) -> str:
    """The text of the section whose heading contains `heading`, up to the next heading of the
    same or a higher level. ValueError when there is none."""
    text = Path(path).read_text(encoding="utf-8")
    head = re.search(rf"^(#+) [^\n]*{re.escape(heading)}[^\n]*$", text, flags=re.M)
    if head is None:
        raise ValueError(f"{path}: no heading containing {heading!r}")
    level = len(head.group(1))
    rest = text[head.end():]
    nxt = re.search(rf"^#{{1,{level}}} ", rest, flags=re.M)
    return rest[: nxt.start()] if nxt else rest


def blocks(path: str | Path, heading: str, lang: str) -> list[str]:
    """The ```lang blocks of the section whose heading contains `heading`, in order.
    ValueError when there are none."""
    found = re.findall(rf"^```{re.escape(lang)}\n(.*?)^```", section(path, heading), flags=re.M | re.S)
    if not found:
        raise ValueError(f"{path}: no ```{lang} block under {heading!r}")
    return found


def tables(path: str | Path, heading: str) -> list[list[dict[str, str]]]:
    """The markdown tables of that section, in order: each a list of rows, a row a dict from
    its header cell to its cell (stripped; an escaped `\\|` is a | inside a cell)."""
    def cells(line: str) -> list[str]:
        return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]

    found = []
    for table in re.findall(r"(?:^\|.*\|[ \t]*\n)+", section(path, heading), flags=re.M):
        header, _rule, *rows = table.splitlines()
        found.append([dict(zip(cells(header), cells(row), strict=True)) for row in rows])
    return found


if __name__ == "__main__":
    path, heading, lang = sys.argv[1:4]
    sys.stdout.write(blocks(path, heading, lang)[0])
