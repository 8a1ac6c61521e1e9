"""The fenced code blocks a doc tells a user to type, extracted so a test runs them verbatim.

    python3 tests/test_helpers/doc_blocks.py README.md "Quick start 2" bash   # prints the block
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def blocks(path: str | Path, heading: str, lang: str) -> list[str]:
    """The ```lang blocks of the section whose heading contains `heading` (up to the next
    heading of the same or a higher level), in order. ValueError when there are none."""
    text = Path(path).read_text(encoding="utf-8")
    head = re.search(rf"^(#+) [^\n]*{re.escape(heading)}[^\n]*$", text, flags=re.M)
    if head is None:
        raise ValueError(f"{path}: no heading containing {heading!r}")
    level = len(head.group(1))
    rest = text[head.end():]
    nxt = re.search(rf"^#{{1,{level}}} ", rest, flags=re.M)
    section = rest[: nxt.start()] if nxt else rest
    found = re.findall(rf"^```{re.escape(lang)}\n(.*?)^```", section, flags=re.M | re.S)
    if not found:
        raise ValueError(f"{path}: no ```{lang} block under {heading!r}")
    return found


if __name__ == "__main__":
    path, heading, lang = sys.argv[1:4]
    sys.stdout.write(blocks(path, heading, lang)[0])
