#!/usr/bin/env python3
"""py.wordfreq: how many words a text (or a file in the sandbox) has, and its most frequent ones.

A Skillbus command skill (configs/local.json, worker gamma): the worker starts it in its sandbox, writes
the parameters to standard input as one JSON object, and takes what it prints on standard output as the
JSON result. A message on standard error and a non-zero exit become the error command_failed.
"""
import json
import os
import re
import sys
from collections import Counter


def main() -> int:
    params = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    text, path, top = params.get("text"), params.get("path"), params.get("top", 5)
    if (text is None) == (path is None):
        print("give exactly one of 'text' and 'path'", file=sys.stderr)
        return 2
    if path is not None:
        root = os.path.realpath(".")  # the working directory is the sandbox
        full = os.path.realpath(os.path.join(root, path))
        if full != root and not full.startswith(root + os.sep):
            print(f"'{path}' is outside the sandbox", file=sys.stderr)
            return 2
        try:
            with open(full, encoding="utf-8") as file:
                text = file.read()
        except OSError as error:
            print(f"cannot read '{path}': {error.strerror}", file=sys.stderr)
            return 1
    words = re.findall(r"[\w']+", text.lower())
    counts = Counter(words)
    result = {
        "words": len(words),
        "distinct": len(counts),
        "top": [{"word": word, "count": count} for word, count in counts.most_common(max(0, top))],
    }
    print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
