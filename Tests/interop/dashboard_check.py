#!/usr/bin/env python3
"""Opens the dashboard in headless Chromium and drives it over the DevTools protocol (websocket-client).
Prints one line per step, for the test that runs it to wait on:
  cards: A,B          the page shows a card for every agent named in AGENTS (and its event stream is live)
  executing: A SKILL  the card of A (the first of AGENTS) shows executingSkill SKILL, as it happens
  executions: A N     A's execution counter went up from what it showed first
  round: SKILL ok     the list of latest rounds shows an invocation of SKILL ended ok
Exits 0 when every step happened, 1 when one did not within its deadline, 77 when Chromium is missing.
Usage: dashboard_check.py URL AGENTS(comma-separated) SKILL"""
import json
import sys

from headless_page import open_page

url, agents, skill = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
watched = agents[0]
page = open_page()
evaluate, wait_for = page.evaluate, page.wait_for
try:
    page.call("Page.navigate", url=url)
    card = f'document.querySelector(\'.card[data-agent="{watched}"]\')'
    names = "[...document.querySelectorAll('.card')].map(c => c.dataset.agent)"
    wait_for("cards of " + ",".join(agents),
             f"document.getElementById('link').dataset.live === 'yes' && "
             f"{json.dumps(agents)}.every(a => {names}.includes(a))")
    first = int(evaluate(f"{card}.querySelector('.executions').textContent"))
    print("cards: " + ",".join(agents), flush=True)
    wait_for(f"{watched}'s card in executingSkill {skill}",
             f"{card} && {card}.dataset.state === 'executingSkill' && {card}.dataset.skill === {json.dumps(skill)}")
    print(f"executing: {watched} {skill}", flush=True)
    count = wait_for(f"{watched}'s execution counter above {first}",
                     f"(n => n > {first} ? n : 0)(Number({card}.querySelector('.executions').textContent))")
    print(f"executions: {watched} {count}", flush=True)
    wait_for(f"a round with {skill} ok in the list",
             f"[...document.querySelectorAll('#rounds div.ok')].some(d => d.textContent.includes('{skill} on {watched}'))")
    print(f"round: {skill} ok", flush=True)
finally:
    page.close()
