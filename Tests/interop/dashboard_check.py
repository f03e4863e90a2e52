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
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import websocket

url, agents, skill = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
watched = agents[0]
browser = shutil.which("chromium") or shutil.which("chromium-browser")
if browser is None:
    print("SKIP: no chromium on PATH (apt-get install -y chromium)", flush=True)
    sys.exit(77)

# A test that gives up sends SIGTERM: leave through `finally`, which stops Chromium too.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
profile = tempfile.mkdtemp(prefix="skillbus-chromium-")
process = subprocess.Popen(
    [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
     "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", f"--user-data-dir={profile}",
     "about:blank"],
    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
found = threading.Event()
endpoint = {}


def read_stderr():
    # Keep reading so that Chromium never blocks on a full pipe.
    for line in process.stderr:
        match = re.search(r"DevTools listening on (ws://\S+)", line)
        if match:
            endpoint["browser"] = match.group(1)
            found.set()


threading.Thread(target=read_stderr, daemon=True).start()


def fail(message):
    print(f"FAILED: {message}", flush=True)
    sys.exit(1)


try:
    if not found.wait(30):
        fail("Chromium did not open its DevTools endpoint within 30 s")
    port = re.match(r"ws://[^:/]+:(\d+)/", endpoint["browser"]).group(1)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
        pages = [target for target in json.load(answer) if target.get("type") == "page"]
    if not pages:
        fail("Chromium has no page target")
    socket = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=10)
    next_id = [0]

    def call(method, **params):
        next_id[0] += 1
        socket.send(json.dumps({"id": next_id[0], "method": method, "params": params}))
        while True:
            message = json.loads(socket.recv())
            if message.get("id") == next_id[0]:
                if "error" in message:
                    fail(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(expression):
        result = call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def wait_for(what, expression, seconds=30):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = evaluate(expression)
            if value:
                return value
            time.sleep(0.05)
        fail(f"{what} within {seconds} s; the page shows: {evaluate('document.body.innerText')!r}")

    call("Page.navigate", url=url)
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
    socket.close()
finally:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
    shutil.rmtree(profile, ignore_errors=True)
