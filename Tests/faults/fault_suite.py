#!/usr/bin/env python3
"""The fault suite: real `skillbus` processes on 127.0.0.1, one fault at a time.

For each case it starts a coordinator and its workers, runs a probe client that sends `echo` every 10 ms
to an agent of its own, samples the coordinator's resident memory (/proc/PID/status VmRSS), applies the
fault, and checks: the coordinator lives, stays under 150 MiB, answers the probe with p99 under 50 ms (or, on a
machine so busy that the probe's p99 without any fault is already high, under twice that; the short form
inside `make test` prints p99 but does not check it, as the project asserts no timings in `make test`),
and the case's own figures (answered once each, refusals seen, ...). Each case runs without keys; those
where keys matter also with keys (CURVE). Prints one line of figures per case; exits 1 when one is wrong.

    python3 Tests/faults/fault_suite.py --binary .build/debug/skillbus [--short] [--case NAME ...]

The wire it speaks is docs/PROTOCOL.md's (pyzmq only). Every load is bounded in count and in time.
"""
import argparse, ctypes, json, os, random, signal, socket, subprocess, sys, tempfile, threading, time, uuid
import zmq


def die_with_parent():
    """In a child before exec: SIGKILL when the suite's process ends, so no process outlives it."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

RSS_LIMIT_MIB = 150
P99_LIMIT_MS = 50
QUIET_FACTOR = 2           # a p99 over the limit still passes when the same run's fault-free p99 was half as high
KILL_ANSWER_LIMIT_S = 2.0   # the heartbeat path takes > 3 s with the default 1 s heartbeats


class Keys:
    """A key set made with `skillbus keygen`: the coordinator's, two workers', a client's."""

    def __init__(self, binary, directory):
        self.directory = directory
        for name in ["coordinator", "w1", "w2", "alice"] if binary else []:
            subprocess.run([binary, "keygen", name, "--dir", directory], check=True, capture_output=True)

    def public(self, name):
        return open(os.path.join(self.directory, name + ".pub"), "rb").read().strip()

    def secret(self, name):
        return open(os.path.join(self.directory, name + ".key"), "rb").read().strip()

    def flags(self, name):
        return ["--server-key", os.path.join(self.directory, "coordinator.pub"),
                "--key", os.path.join(self.directory, name + ".key")]

    def config(self):
        keys = [{"name": "w1", "role": "worker", "agents": ["probe", "alpha", "grep"], "publicKey": "w1.pub"},
                {"name": "w2", "role": "worker", "agents": ["beta", "load"], "publicKey": "w2.pub"},
                {"name": "alice", "role": "client", "publicKey": "alice.pub"}]
        path = os.path.join(self.directory, "coordinator.json")
        with open(path, "w") as f:
            json.dump({"version": 1, "security": {"secretKey": "coordinator.key", "keys": keys}}, f)
        return path


class Process:
    """A child process whose output lines are kept, read by a thread."""

    def __init__(self, arguments, name, environment=None):
        self.name = name
        self.lines = []
        self.lock = threading.Condition()
        self.process = subprocess.Popen(arguments, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=environment, preexec_fn=die_with_parent)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            with self.lock:
                self.lines.append(line.rstrip("\n"))
                self.lock.notify_all()

    def wait_for(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                for line in self.lines:
                    if predicate(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise RuntimeError(f"{self.name}: no {what} within {timeout} s; output: {self.lines[-5:]}")
                self.lock.wait(min(left, 0.1))

    def count(self, predicate):
        with self.lock:
            return sum(1 for line in self.lines if predicate(line))

    def alive(self):
        return self.process.poll() is None

    def stop(self, sig=signal.SIGTERM):
        if self.alive():
            self.process.send_signal(sig)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


class Cluster:
    """A coordinator (with keys when `keys` is set) and workers, each started by PID and stopped by it."""

    def __init__(self, binary, keys, scratch):
        self.binary, self.keys, self.workers, self.scratch = binary, keys, {}, scratch
        arguments = [binary, "coordinator", "--bus", "tcp://127.0.0.1:*", "--feed", "tcp://127.0.0.1:*"]
        if keys:
            arguments += ["--config", keys.config()]
        self.coordinator = Process(arguments, "coordinator")
        ready = self.coordinator.wait_for(lambda l: l.startswith("skillbus coordinator ready:"), 20, "ready line")
        fields = dict(part.split("=", 1) for part in ready.split() if "=" in part)
        self.bus, self.feed = fields["bus"], fields["feed"]
        self.context = zmq.Context()

    @property
    def pid(self):
        return self.coordinator.process.pid

    def worker(self, name, skills, capacity=4, key="w1"):
        arguments = [self.binary, "worker", "--name", name, "--coordinator", self.bus, "--skills", skills,
                     "--capacity", str(capacity)] + (self.keys.flags(key) if self.keys else [])
        # Each worker's context in a folder of its own (removed with the suite's temporary folder).
        environment = dict(os.environ, XDG_STATE_HOME=os.path.join(self.scratch, name))
        process = Process(arguments, name, environment)
        self.workers[name] = process
        self.coordinator.wait_for(lambda l: f"agent '{name}' joined" in l, 20, f"{name} joining")
        return process

    def dealer(self, key="alice", curve=True):
        """A DEALER on the bus; with keys it uses `key` (none when `curve` is false)."""
        s = self.context.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        if self.keys and curve:
            s.curve_serverkey = self.keys.public("coordinator")
            s.curve_secretkey, s.curve_publickey = self.keys.secret(key), self.keys.public(key)
        s.connect(self.bus)
        return s

    def subscriber(self, prefixes, key="w1"):
        s = self.context.socket(zmq.SUB)
        s.setsockopt(zmq.LINGER, 0)
        if self.keys:
            s.curve_serverkey = self.keys.public("coordinator")
            s.curve_secretkey, s.curve_publickey = self.keys.secret(key), self.keys.public(key)
        for prefix in prefixes:
            s.setsockopt(zmq.SUBSCRIBE, prefix)
        s.connect(self.feed)
        return s

    def stop(self):
        for process in self.workers.values():
            process.stop(signal.SIGKILL)
        self.coordinator.stop()
        self.context.destroy(linger=0)


def request(skill, params, timeout_ms=5000, request_id=None):
    rid = (request_id or uuid.uuid4().hex[:12]).encode()
    frames = [b"SKB1C", b"REQUEST", rid, str(uuid.uuid4()).encode(), b"", skill.encode(), str(timeout_ms).encode(),
              json.dumps(params).encode()]
    return rid, frames


def receive_until(s, deadline, accept):
    """Reads replies until `accept(frames)` returns True or the deadline passes."""
    while (left := deadline - time.monotonic()) > 0:
        if s.poll(int(left * 1000) + 1):
            if accept(s.recv_multipart()):
                return True
    return False


def probe_main(bus, key_directory, count):
    """The probe, in a process of its own (so that the suite's threads never delay it): an echo to the
    `probe` agent every 10 ms until its standard input closes (or, with a `count`, until that many were
    answered); then its latencies as JSON."""
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    if key_directory:
        keys = Keys(None, key_directory)
        s.curve_serverkey = keys.public("coordinator")
        s.curve_secretkey, s.curve_publickey = keys.secret("alice"), keys.public("alice")
    s.connect(bus)
    stopping = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stopping.set()), daemon=True).start()
    latencies, failures = [], 0
    while not stopping.is_set() and not (count and len(latencies) >= count):
        rid, frames = request("echo", {"text": "probe"}, timeout_ms=2000)
        started = time.monotonic()
        s.send_multipart(frames)
        if receive_until(s, started + 3, lambda f: len(f) >= 5 and f[1:3] == [b"REPLY", rid] and f[4] == b"ok"):
            latencies.append((time.monotonic() - started) * 1000)
        else:
            failures += 1
        stopping.wait(0.01)
    print(json.dumps({"latencies": latencies, "failures": failures}), flush=True)


def huge_subscriber_main(feed, key_directory):
    """A subscriber of a 4 MiB prefix, in a process of its own: libzmq's own subscription trie recurses once
    per byte, so closing such a socket overflows the stack; this process leaves without closing it."""
    s = zmq.Context.instance().socket(zmq.SUB)
    if key_directory:
        keys = Keys(None, key_directory)
        s.curve_serverkey = keys.public("coordinator")
        s.curve_secretkey, s.curve_publickey = keys.secret("w1"), keys.public("w1")
    s.setsockopt(zmq.SUBSCRIBE, b"agent." + b"x" * (4 << 20))
    s.connect(feed)
    time.sleep(1.5)
    os._exit(0)


def wait_for_subscription(sub):
    """Waits for the first event a subscriber gets (it subscribes to `registry.heartbeat`, sent every second):
    from then on its subscriptions are in place at the bus."""
    if not receive_until(sub, time.monotonic() + 5, lambda f: True):
        raise RuntimeError("the feed sent nothing within 5 s")


class Probe:
    """Another client measuring echo latency during the fault (`probe_main` in a child process)."""

    def __init__(self, cluster, count=0):
        self.count = count
        arguments = [sys.executable, __file__, "--probe", cluster.bus, "--probe-count", str(count)]
        if cluster.keys:
            arguments += ["--probe-keys", cluster.keys.directory]
        self.process = subprocess.Popen(arguments, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        preexec_fn=die_with_parent)

    def finish(self):
        """Stops it (or, with a count, waits until it has that many answers) and returns p99, answers, failures."""
        if self.count:
            self.process.wait(timeout=30)  # it stops by itself; closing its input now would stop it early
        output, _ = self.process.communicate("", timeout=30)
        result = json.loads(output.strip().splitlines()[-1])
        ordered = sorted(result["latencies"])
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else float("inf")
        return p99, len(ordered), result["failures"]


class RssSampler(threading.Thread):
    """The coordinator's VmRSS every 20 ms: the largest and the last seen."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.last, self.stopping = pid, 0, 0, threading.Event()

    def sample(self):
        try:
            for line in open(f"/proc/{self.pid}/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0

    def run(self):
        while not self.stopping.is_set():
            self.last = self.sample()
            self.peak = max(self.peak, self.last)
            self.stopping.wait(0.02)

    def finish(self):
        self.stopping.set()
        self.join(5)
        return self.peak, self.sample()


# ---- The cases: each takes (cluster, seconds) and returns (figures, problems). -----------------------------

def worker_kill(cluster, seconds):
    """kill -9 of a worker under load: every request answered exactly once, the lost worker's within ~1 s."""
    alpha = cluster.worker("alpha", "sleep", capacity=4, key="w1")
    cluster.worker("beta", "sleep", capacity=4, key="w2")
    left = cluster.subscriber([b"agent.left", b"request.dispatched", b"registry.heartbeat"])
    wait_for_subscription(left)
    client = cluster.dealer()
    ids = []
    for _ in range(64):
        rid, frames = request("sleep", {"ms": 300}, timeout_ms=30000)
        ids.append(rid)
        client.send_multipart(frames)
    # The kill comes once alpha runs four of them.
    on_alpha = []
    receive_until(left, time.monotonic() + 10, lambda f: f[0] == b"request.dispatched" and b'"alpha"' in f[1] and
                  on_alpha.append(1) is None and len(on_alpha) == 4)
    killed = time.monotonic()
    alpha.stop(signal.SIGKILL)
    answers, lost_at = {}, []

    def take(f):
        if len(f) >= 5 and f[1] == b"REPLY":
            answers[f[2]] = answers.get(f[2], 0) + 1
            if f[4] == b"error" and b"agent_lost" in f[-1]:
                lost_at.append(time.monotonic() - killed)
        return len(answers) == len(ids)

    gone = []
    receive_until(left, killed + 10, lambda f: f[0] == b"agent.left" and b'"alpha"' in f[1] and
                  gone.append(time.monotonic() - killed) is None)
    left.close()
    receive_until(client, time.monotonic() + 30, take)
    receive_until(client, time.monotonic() + 0.5, lambda f: take(f) and False)  # a second answer would show
    client.close()
    missing = [r for r in ids if r not in answers]
    twice = [r for r, n in answers.items() if n > 1]
    slowest = max(lost_at, default=0)
    problems = []
    if missing: problems.append(f"{len(missing)} requests never answered")
    if twice: problems.append(f"{len(twice)} requests answered twice")
    if not gone: problems.append("the killed worker never left")
    elif gone[0] > KILL_ANSWER_LIMIT_S: problems.append(f"the killed worker left {gone[0]:.2f} s after the kill")
    if slowest > KILL_ANSWER_LIMIT_S: problems.append(f"agent_lost answers {slowest:.2f} s after the kill")
    lost_after = f"{gone[0] * 1000:.0f} ms" if gone else "never"
    return (f"64 requests answered once each ({len(ids) - len(missing) - len(lost_at)} ok, {len(lost_at)} agent_lost); "
            f"worker lost {lost_after} after kill -9"), problems


def fuzz(cluster, seconds):
    """Random and mutated frames on the bus, raw TCP junk at the bus and feed ports."""
    deadline = time.monotonic() + seconds
    rng = random.Random(13)
    sent = [0, 0]
    valid = [request("echo", {"text": "x"})[1], [b"SKB1W", b"READY", b'{"name":"fz","capacity":1,"skills":[]}'],
             [b"SKB1C", b"ROUND", b"r", b"round", b"", b"1000", b'{"invoke":{"skill":"echo"}}'],
             [b"SKB1W", b"RESULT", b"i1", b"ok", b"{}"], [b"SKB1C", b"CANCEL", b"x"], [b"SKB1W", b"HEARTBEAT"]]

    def mutate(frames):
        frames = [bytearray(f) for f in frames]
        for _ in range(rng.randint(1, 4)):
            choice = rng.random()
            if choice < 0.3 and frames:
                f = rng.choice(frames)
                if f: f[rng.randrange(len(f))] = rng.randrange(256)
            elif choice < 0.5 and frames:
                frames.pop(rng.randrange(len(frames)))
            elif choice < 0.7:
                frames.insert(rng.randint(0, len(frames)), bytearray(rng.randbytes(rng.randint(0, 64))))
            elif frames:
                i = rng.randrange(len(frames))
                frames[i] = frames[i][:rng.randint(0, len(frames[i]))]
        return [bytes(f) for f in frames] or [b""]

    def frames_worker():
        s = cluster.dealer()
        while time.monotonic() < deadline and sent[0] < 200_000:
            if rng.random() < 0.5:
                frames = mutate(rng.choice(valid))
            else:
                frames = [rng.randbytes(rng.randint(0, 40)) for _ in range(rng.randint(1, 12))]
            s.send_multipart(frames)
            sent[0] += 1
            while s.poll(0):
                s.recv_multipart()
            if sent[0] % 500 == 0:
                s.close()
                s = cluster.dealer()
                time.sleep(0.01)  # pace: the fault must not be a CPU race with the probe on two cores
        s.close()

    def tcp_worker():
        ports = [int(cluster.bus.rsplit(":", 1)[1]), int(cluster.feed.rsplit(":", 1)[1])]
        greeting = b"\xff" + b"\x00" * 8 + b"\x01\x7f\x03\x00NULL" + b"\x00" * 16
        while time.monotonic() < deadline and sent[1] < 20_000:
            try:
                with socket.create_connection(("127.0.0.1", rng.choice(ports)), timeout=1) as c:
                    junk = rng.randbytes(rng.randint(1, 4096))
                    c.sendall(greeting[:rng.randint(0, len(greeting))] + junk if rng.random() < 0.5 else junk)
                sent[1] += 1
            except OSError:
                pass
            time.sleep(0.002)

    threads = [threading.Thread(target=frames_worker), threading.Thread(target=tcp_worker)]
    for t in threads: t.start()
    for t in threads: t.join(seconds + 10)
    return f"{sent[0]} fuzzed messages and {sent[1]} junk TCP connections in {seconds:.0f} s", []


def churn(cluster, seconds):
    """500 sockets connecting, asking, and disconnecting, in batches of 50."""
    made = 0
    deadline = time.monotonic() + max(seconds, 5)
    while made < 500 and time.monotonic() < deadline:
        batch = [cluster.dealer(curve=(made // 50) % 2 == 0) for _ in range(50)]  # with keys, half have none
        for s in batch:
            s.send_multipart([b"SKB1C", b"SKILLS", b"churn"])
        time.sleep(0.05)
        for s in batch:
            s.close()
        made += len(batch)
    return f"{made} sockets connected and closed", [] if made == 500 else [f"only {made} sockets in time"]


def slow_client(cluster, seconds):
    """A client that sends thousands of requests and never reads a reply."""
    cluster.worker("load", "text.stats", capacity=8, key="w2")
    s = cluster.dealer()
    s.setsockopt(zmq.RCVHWM, 10)
    s.setsockopt(zmq.RCVBUF, 4096)
    deadline, sent = time.monotonic() + seconds, 0
    while time.monotonic() < deadline and sent < 20_000:
        s.send_multipart(request("text.stats", {"text": "never read " * 20})[1])
        sent += 1
        if sent % 100 == 0:
            time.sleep(0.01)
    s.close()
    return f"{sent} requests whose replies were never read", []


def slow_subscriber(cluster, seconds):
    """A feed subscriber to everything that never reads, while requests make events."""
    cluster.worker("load", "text.stats", capacity=8, key="w2")
    sub = cluster.subscriber([b""])
    sub.setsockopt(zmq.RCVHWM, 1)
    client = cluster.dealer()
    deadline, sent, answered = time.monotonic() + seconds, 0, 0
    while time.monotonic() < deadline and sent < 50_000:
        for _ in range(50):
            client.send_multipart(request("text.stats", {"text": "events " * 20})[1])
            sent += 1
        answered += sum(1 for _ in iter(lambda: client.poll(0) and client.recv_multipart(), 0))
        time.sleep(0.02)
    sub.close()
    client.close()
    return f"{sent} requests' events to a subscriber that never reads", []


def oversize(cluster, seconds):
    """Messages and subscriptions over the limits: refused with the limit named, nobody else slowed."""
    problems = []
    watcher = cluster.subscriber([b"limits.", b"registry.heartbeat"])
    wait_for_subscription(watcher)
    s = cluster.dealer()

    def expect_refusal(frames, word, what):
        s.send_multipart(frames, copy=False)
        got = []
        receive_until(s, time.monotonic() + 10,
                      lambda f: f[1:2] == [b"ERROR"] and got.append(f) is None)
        if not got or b"message_too_large" not in got[0][-1] or word not in got[0][-1]:
            problems.append(f"{what}: no message_too_large naming {word!r} ({got[:1]})")

    rid, frames = request("echo", {"text": "x" * (3 << 19)})  # 1.5 MiB of parameters
    expect_refusal(frames, b"maxMessageBytes", "a 1.5 MiB request")
    expect_refusal([b"SKB1C", b"REQUEST"] + [b"f" * 1024] * 1000, b"maxFrames", "1000 frames of 1 KiB")
    giant = b"\x00" * (8 << 20)
    s.send_multipart([b"SKB1C", b"REQUEST", giant], copy=False)  # over the hard cap: libzmq drops the connection
    s.close()
    # Subscriptions: a 1 KiB prefix is refused and counted; a 4 MiB one closes that subscriber's connection.
    long_sub = cluster.subscriber([b"agent." + b"x" * 1024])
    huge = [sys.executable, __file__, "--huge-subscriber", cluster.feed]
    huge_sub = subprocess.Popen(huge + (["--probe-keys", cluster.keys.directory] if cluster.keys else []),
                                preexec_fn=die_with_parent)
    seen = []
    receive_until(watcher, time.monotonic() + 5,
                  lambda f: f[0] == b"limits.refused" and seen.append(json.loads(f[1])) is None and any(
                      e.get("limit") == "maxSubscriptionBytes" for e in seen))
    limits = sorted({e.get("limit") for e in seen})
    for limit in ["maxFrames", "maxMessageBytes", "maxSubscriptionBytes"]:
        if limit not in limits:
            problems.append(f"no limits.refused for {limit} on the feed (saw {limits})")
    huge_sub.wait(10)
    for sub in [long_sub, watcher]:
        sub.close()
    return f"1.5 MiB, 1000-frame and 8 MiB messages and 1 KiB and 4 MiB subscriptions refused ({', '.join(limits)})", problems


def giant_multipart(cluster, seconds):
    """Frames of 1 MiB in one message: refused, and the memory libzmq held for it is given back."""
    frames = 1000 if seconds >= 10 else 100
    s = cluster.dealer()
    block = b"\x00" * (1 << 20)
    s.send_multipart([b"SKB1C", b"REQUEST"] + [block] * frames, copy=False)
    got = []
    receive_until(s, time.monotonic() + 30, lambda f: f[1:2] == [b"ERROR"] and got.append(f) is None)
    s.close()
    problems = [] if got and b"maxFrames" in got[0][-1] else ["no message_too_large for the giant message"]
    return f"{frames} frames of 1 MiB in one message refused", problems


def rogue_agents(cluster, seconds):
    """Rogues that try to take a live agent's name: no keys, a client's key, another worker's key."""
    cluster.worker("alpha", "text.stats", capacity=2, key="w1")
    problems, outcomes = [], []
    rogues = [("no keys", None)] + ([("a client key", "alice"), ("another worker's key", "w2")] if cluster.keys else [])
    for what, key in rogues:
        r = cluster.dealer(key=key or "alice", curve=key is not None)
        r.send_multipart([b"SKB1W", b"READY", json.dumps({"name": "alpha", "capacity": 1, "skills": [
            {"identifier": "text.stats", "parameters": [{"name": "text", "type": "string"}]}]}).encode()])
        got = []
        receive_until(r, time.monotonic() + 2, lambda f: got.append(f) is None)
        r.close()
        answer = json.loads(got[0][-1]).get("code") if got else "no answer (handshake refused)"
        outcomes.append(f"{what}: {answer}")
        if got and got[0][1] != b"ERROR":
            problems.append(f"rogue with {what} was not refused: {got[0][1]}")
    # The real alpha still answers every request for its skill.
    client = cluster.dealer()
    agents = []
    for _ in range(20):
        rid, frames = request("text.stats", {"text": "who answers"})
        client.send_multipart(frames)
        receive_until(client, time.monotonic() + 5,
                      lambda f: f[1:3] == [b"REPLY", rid] and agents.append(f[5]) is None)
    client.close()
    if agents != [b"alpha"] * 20:
        problems.append(f"requests answered by {sorted(set(agents))}, {len(agents)} of 20")
    return "; ".join(outcomes) + "; alpha answered 20 of 20", problems


def catastrophic_regex(cluster, seconds):
    """text.grep with (a+)+$ on every slot: each stops at its deadline, and the agent is not declared dead."""
    cluster.worker("grep", "text.grep", capacity=2, key="w1")
    client = cluster.dealer()
    ids = set()
    for _ in range(4):
        rid, frames = request("text.grep", {"pattern": "(a+)+$", "text": "a" * 40 + "b"}, timeout_ms=1500)
        ids.add(rid)
        client.send_multipart(frames)
    started, codes = time.monotonic(), []
    receive_until(client, started + 15, lambda f: f[1] == b"REPLY" and f[2] in ids and codes.append(
        json.loads(f[-1]).get("code")) is None and len(codes) == 4)
    elapsed = time.monotonic() - started
    client.close()
    problems = []
    if codes != ["timeout"] * 4: problems.append(f"answers {codes}")
    if cluster.coordinator.count(lambda l: "agent 'grep' left" in l): problems.append("the busy agent was declared dead")
    return f"4 searches ended {codes.count('timeout')}x timeout after {elapsed:.1f} s; the agent stayed", problems


# name: (function, runs with keys too)
CASES = {
    "worker-kill": (worker_kill, False),
    "fuzz": (fuzz, True),
    "churn": (churn, True),
    "slow-client": (slow_client, False),
    "slow-subscriber": (slow_subscriber, False),
    "oversize": (oversize, True),
    "giant-multipart": (giant_multipart, False),
    "rogue-agents": (rogue_agents, True),
    "catastrophic-regex": (catastrophic_regex, False),
    # The coordinator's own cases — kill -9 and restart five times under load (nothing lost or answered twice,
    # workers back within 5 s) and a round id across a restart — need a client that resends its round, so
    # they live in Tests/SkillbusIntegrationTests/JournalClusterTests.swift, which `make faults` runs next.
}


def run_case(name, function, binary, keys, seconds, scratch, check_p99):
    cluster = Cluster(binary, keys, scratch)
    try:
        cluster.worker("probe", "echo", capacity=4, key="w1")
        # The probe's p99 with no fault, in the same run: on a machine others share it can be over the
        # limit by itself, and then only a fault that makes it much worse fails the case.
        quiet_p99, _, _ = Probe(cluster, count=100).finish()
        if quiet_p99 == float("inf"):
            raise RuntimeError("the probe got no answer without any fault")
        rss = RssSampler(cluster.pid)
        rss.start()
        probe = Probe(cluster)
        time.sleep(0.3)  # a few probe answers before the fault
        figures, problems = function(cluster, seconds)
        time.sleep(0.5)  # and after it
        p99, answered, failed = probe.finish()
        peak, settled = rss.finish()
        if not cluster.coordinator.alive(): problems.append("the coordinator died")
        # libzmq holds a multipart message whole until its last frame (PROTOCOL §9): while one arrives, its
        # size and the I/O thread's time are not ours to bound, so those two figures are only reported.
        bounded = name != "giant-multipart"
        if bounded and peak > RSS_LIMIT_MIB: problems.append(f"RSS peak {peak:.0f} MiB > {RSS_LIMIT_MIB}")
        if settled > RSS_LIMIT_MIB: problems.append(f"RSS after the fault {settled:.0f} MiB > {RSS_LIMIT_MIB}")
        if check_p99 and bounded and p99 > max(P99_LIMIT_MS, QUIET_FACTOR * quiet_p99):
            problems.append(f"probe p99 {p99:.1f} ms > {P99_LIMIT_MS} (and over {QUIET_FACTOR}x its {quiet_p99:.1f} ms without the fault)")
        if not bounded:
            figures += " (peak and p99 not bounded: libzmq holds the message whole until its last frame, PROTOCOL §9)"
        if failed: problems.append(f"{failed} probe requests unanswered")
        return (f"{name:<19} keys={'on ' if keys else 'off'} RSS peak {peak:5.1f} MiB, after {settled:5.1f} MiB; "
                f"probe p99 {p99:5.1f} ms ({answered} answered; {quiet_p99:.1f} ms without the fault); {figures}"), problems
    finally:
        cluster.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=".build/debug/skillbus")
    parser.add_argument("--short", action="store_true",
                        help="two seconds per case, p99 printed but not checked (make test: no timed assertions)")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="run only these (repeatable)")
    parser.add_argument("--probe", help=argparse.SUPPRESS)  # the probe's own process: the bus endpoint
    parser.add_argument("--probe-keys", help=argparse.SUPPRESS)
    parser.add_argument("--probe-count", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--huge-subscriber", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.huge_subscriber:
        return huge_subscriber_main(options.huge_subscriber, options.probe_keys)
    if options.probe:
        return probe_main(options.probe, options.probe_keys, options.probe_count)
    seconds = 2 if options.short else 60
    failures = 0
    with tempfile.TemporaryDirectory(prefix="skillbus-fault-keys-") as directory:
        keys = Keys(options.binary, directory)
        for name in options.case or list(CASES):
            function, with_keys = CASES[name]
            # The long form's loads run 60 s for fuzzing and 10 s for the others.
            case_seconds = seconds if name == "fuzz" or options.short else 10
            for key_set in [None, keys] if with_keys else [None]:
                for attempt in [1, 2]:
                    try:
                        scratch = tempfile.mkdtemp(dir=directory)
                        line, problems = run_case(
                            name, function, options.binary, key_set, case_seconds, scratch, not options.short)
                    except Exception as error:  # a case that could not run is a failure, said plainly
                        line, problems = f"{name:<19} keys={'on ' if key_set else 'off'} could not run", [repr(error)]
                    # On a shared machine one scheduling hiccup can be the probe's 99th percentile: a case
                    # whose only problem is its p99 runs once more (both printed); a real stall fails twice.
                    if attempt == 1 and problems and all(p.startswith("probe p99") for p in problems):
                        print(f"again {line} ({problems[0]})", flush=True)
                        continue
                    break
                print(("ok   " if not problems else "FAIL ") + line, flush=True)
                for problem in problems:
                    print(f"       - {problem}", flush=True)
                failures += bool(problems)
    print(f"fault suite: {failures} case(s) failed" if failures else "fault suite: every case held", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
