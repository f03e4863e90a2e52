#!/usr/bin/env python3
"""Opens the dashboard in headless Chromium (headless_page.py) and reads its session view from the DOM after
the page's script drew it. Prints one line per step, for the test that runs it to wait on:
  ready            the page's event stream is live: the test may start the session now
  live: JSON       the session showed, finished, while the page watched it (from the live feed)
  history: JSON    the same after a reload (from /sessions)
JSON: {agent: {"states": [the state of each bar, in order], "calls": [each call mark's tooltip]}} for each of
AGENTS, read from the agent's top-level row of the timeline; a step happens once every agent's row has at
least one bar and one call mark. Exits 0 when every step happened, 1 when one did not within its deadline,
77 when Chromium is missing.
Usage: session_view_check.py URL SESSION AGENTS(comma-separated)"""
import json
import sys

from headless_page import open_page

url, session, agents = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
# Chooses the session in the list (a click, as a person would), then reads each agent's row; false until the
# session has finished and every row has a bar and a call mark.
picture = f"""(() => {{
  const row = [...document.querySelectorAll('#sessions tr')].find(r => r.dataset.session === {json.dumps(session)});
  if (!row || row.dataset.live !== 'no') return false;
  if (!row.classList.contains('chosen')) {{ row.click(); return false; }}
  const rows = [...document.querySelectorAll('#timeline g.row')].filter(g => g.dataset.depth === '0');
  const seen = {{}};
  for (const agent of {json.dumps(agents)}) {{
    const group = rows.find(g => g.dataset.agent === agent);
    if (!group) return false;
    const states = [...group.querySelectorAll('rect.state')].map(bar => bar.dataset.state);
    const calls = [...group.querySelectorAll('.call')].map(mark => mark.textContent);
    if (states.length === 0 || calls.length === 0) return false;
    seen[agent] = {{states, calls}};
  }}
  return JSON.stringify(seen);
}})()"""
page = open_page()
try:
    page.call("Page.navigate", url=url)
    page.wait_for("the event stream to be live", "document.getElementById('link').dataset.live === 'yes'")
    print("ready", flush=True)
    print("live: " + page.wait_for(f"session {session} with rows for {','.join(agents)}", picture, 60), flush=True)
    # The mark tells the new document from the old one, which may still answer just after the reload.
    page.evaluate("window.beforeReload = true")
    page.call("Page.reload")
    page.wait_for("the event stream to be live again",
                  "!window.beforeReload && document.getElementById('link').dataset.live === 'yes'")
    print("history: " + page.wait_for(f"session {session} after a reload", picture), flush=True)
finally:
    page.close()
