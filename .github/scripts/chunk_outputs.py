"""Turns one chunk of `cuw matrix --chunk` into GitHub step outputs (compile, link, has_link)."""

import json
import sys

chunk = json.load(open(sys.argv[1], encoding="utf-8"))
print("compile=" + json.dumps(chunk["compile"], separators=(",", ":")))
print("link=" + json.dumps(chunk["link"], separators=(",", ":")))
print("has_link=" + ("true" if chunk["link"]["include"] else "false"))
