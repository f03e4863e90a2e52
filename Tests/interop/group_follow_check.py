#!/usr/bin/env python3
"""Opens a coordinator group's dashboard in headless Chromium (headless_page.py) and watches it follow the leader.
Prints one line per step, for the test that runs it to wait on (and every change of the header's follow note):
  note: TEXT          the header's follow note changed to TEXT (not empty)
  N followed: URL     step N (from 1) is URL@MEMBERS: the page is live on URL's dashboard, which leads, and
                      names exactly MEMBERS (comma-separated) as the group's members
  N noted: WORDS      step N is note:WORDS: the follow note says WORDS
The page is opened on START; the steps happen in order, each within 30 s (the test acts between them).
Exits 0 when every step happened, 1 when one did not within its deadline, 77 when Chromium is missing.
Usage: group_follow_check.py START STEP…   (STEP: URL@MEMBERS, or note:WORDS)"""
import json
import sys
import time

from headless_page import fail, open_page

start, steps = sys.argv[1], sys.argv[2:]
page = open_page()
note = ""


def on_leader(step):
    url, members = step.rsplit("@", 1)
    return f"""(() => {{
      const link = document.getElementById('link'), follow = document.getElementById('follow');
      return location.origin === new URL({json.dumps(url)}).origin && link && link.dataset.live === 'yes' &&
        document.getElementById('summary').textContent.includes('leads group') &&
        follow.dataset.members === {json.dumps(members)};
    }})()"""


def happened(step):
    """Whether `step` happened; prints every new follow note on the way."""
    global note
    # A page that is navigating has no document for a moment: that is no failure.
    text = page.evaluate_or_none("(document.getElementById('follow') || {}).textContent || ''")
    if text and text != note:
        print(f"note: {text}", flush=True)
    note = text or note
    if step.startswith("note:"):
        return step[5:] in (text or "")
    return bool(page.evaluate_or_none(on_leader(step)))


try:
    page.call("Page.navigate", url=start)
    for number, step in enumerate(steps, 1):
        deadline = time.monotonic() + 30
        while not happened(step):
            if time.monotonic() > deadline:
                fail(f"{step} within 30 s; the page is at {page.evaluate_or_none('location.href')!r} showing "
                     f"{page.evaluate_or_none('document.body.innerText')!r}")
            time.sleep(0.05)
        print(f"{number} noted: {step[5:]}" if step.startswith("note:") else f"{number} followed: {step.split('@')[0]}",
              flush=True)
finally:
    page.close()
