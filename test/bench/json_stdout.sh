#!/usr/bin/env bash
# A benchmark program's stdout under --benchmark_format=json is one JSON document, with KEY in its
# "context" (what the program says about the run goes there, not to stdout before the JSON).
# Usage: json_stdout.sh KEY COMMAND...
set -euo pipefail
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
key=$1
shift
out=$("$@" --benchmark_format=json)
printf '%s' "$out" | python3 -c '
import json, sys
key = sys.argv[1]
doc = json.load(sys.stdin)
assert key in doc["context"], "no %r in the context: %r" % (key, sorted(doc["context"]))
assert doc["benchmarks"], "no benchmark rows"
print("json_stdout: ok,", key, "=", doc["context"][key], ",", len(doc["benchmarks"]), "rows")
' "$key"
