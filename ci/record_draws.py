"""Every case the hunt draws (`lrkv.verify.hunt.draw_cases`) at four levels and four seeds, with
and without fp8, as JSON lines; prints the count and the sha256. Run at two commits to show a
change to the strategies keeps old hunt seeds replaying the same cases:

    python3 ci/record_draws.py /tmp/draws-before.jsonl   # at each commit, then cmp the files
"""

import hashlib
import json
import sys

from lrkv.verify.hunt import draw_cases

LEVELS = ("kernel-paged", "kernel-extend", "kernel", "layer")
SEEDS = (0, 1, 37, 383)
EXAMPLES = 150

lines = []
for level in LEVELS:
    for seed in SEEDS:
        for fp8 in (False, True) if level != "layer" else (False,):
            drawn = draw_cases(level, ("float64", "float32", "bfloat16"), EXAMPLES, seed, fp8=fp8)
            lines += [json.dumps(c.to_json(), sort_keys=True) for c in drawn]
text = "\n".join(lines) + "\n"
open(sys.argv[1], "w").write(text)
print(len(lines), "cases, sha256", hashlib.sha256(text.encode()).hexdigest())
