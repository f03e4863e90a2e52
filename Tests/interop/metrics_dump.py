#!/usr/bin/env python3
"""Fetches a Prometheus text exposition and parses it with prometheus_client's own parser (the one the
ecosystem trusts), then prints one JSON line: {"families": [{"name", "type", "samples": [{"name", "labels",
"value"}]}]}. A text the parser refuses makes it exit 1 with the parser's message.
Usage: metrics_dump.py URL"""
import json
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

url = sys.argv[1]
with urllib.request.urlopen(url, timeout=10) as answer:
    content_type = answer.headers.get("Content-Type", "")
    text = answer.read().decode("utf-8")
try:
    families = [
        {
            "name": family.name,
            "type": family.type,
            "help": family.documentation,
            "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in family.samples],
        }
        for family in text_string_to_metric_families(text)
    ]
except Exception as error:  # the parser's own complaint is the test's evidence
    print(f"prometheus_client refused the exposition: {error}", file=sys.stderr)
    sys.exit(1)
print(json.dumps({"contentType": content_type, "families": families}))
