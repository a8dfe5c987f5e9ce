"""Turns one chunk of `cuw matrix --chunk` into GitHub step outputs (compile, link, has_compile, has_link)."""

import json
import sys

chunk = json.load(open(sys.argv[1], encoding="utf-8"))
print("compile=" + json.dumps(chunk["compile"], separators=(",", ":")))
print("link=" + json.dumps(chunk["link"], separators=(",", ":")))
# A chunk whose cells are all published with today's inputs has no jobs: nothing runs after the plan.
print("has_compile=" + ("true" if chunk["compile"]["include"] else "false"))
print("has_link=" + ("true" if chunk["link"]["include"] else "false"))
