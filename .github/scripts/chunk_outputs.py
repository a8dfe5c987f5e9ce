"""Turns one chunk of `cuw matrix --chunk` into GitHub step outputs: per matrix (the rungs compile,
compile_2, ..., then link) its JSON and has_<matrix> (true when it holds a job; an empty one is skipped)."""

import json
import sys

chunk = json.load(open(sys.argv[1], encoding="utf-8"))
# cuw/ci/matrix.py MATRICES: every rung and the link, each a key of the chunk (an empty one holds no job).
for key in [k for k in chunk if k == "link" or k.startswith("compile")]:
    print(f"{key}=" + json.dumps(chunk[key], separators=(",", ":")))
    # A chunk whose cells are all published with today's inputs has no jobs: nothing runs after the plan.
    print(f"has_{key}=" + ("true" if chunk[key]["include"] else "false"))
