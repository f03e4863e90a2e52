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

The wire it speaks is docs/PROTOCOL.md's fields in v2 framing (`pack`, `unpack`; pyzmq only). Every load is
bounded in count and in time.
"""
import argparse, ctypes, json, os, random, signal, socket, subprocess, sys, tempfile, threading, time, uuid
import zmq


def die_with_parent():
    """In a child before exec: SIGKILL when the suite's process ends, so no process outlives it."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

RSS_LIMIT_MIB = 150
GIANT_RSS_LIMIT_MIB = 100  # 1,000 frames of 1 MiB in one message: discarded as they arrive, never held
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


# ---- The wire, v2, as the Python peer reads docs/PROTOCOL.md §2.1 (one copy of the framing and its tables).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
from skillbus_peer import CLIENT, WORKER, V1_HEADERS as V1, TO_BUS, FROM_BUS  # noqa: E402
import skillbus_peer  # noqa: E402


def envelope(header, fields):
    """An envelope holding `fields` whatever the command's layout says (for the mis-encoded ones)."""
    out = bytearray(header)
    for f in fields:
        out += (bytes([len(f)]) if len(f) < 255 else b"\xff" + len(f).to_bytes(4, "big")) + f
    return bytes(out)


def pack(fields, table=TO_BUS):
    """The frames of a message given as its fields (field 0 the header, 1 the command)."""
    return skillbus_peer.pack(list(fields), table)


def unpack(frames, table=FROM_BUS):
    """The fields of a message; ValueError for another header, a truncated envelope, an unknown command, a wrong split."""
    return skillbus_peer.unpack(list(frames), table)


def request(skill, params, timeout_ms=5000, request_id=None):
    rid = (request_id or uuid.uuid4().hex[:12]).encode()
    fields = [CLIENT, b"REQUEST", rid, str(uuid.uuid4()).encode(), b"", skill.encode(), str(timeout_ms).encode(),
              json.dumps(params).encode()]
    return rid, pack(fields)


def receive_until(s, deadline, accept):
    """Reads messages until `accept(frames)` returns True or the deadline passes."""
    while (left := deadline - time.monotonic()) > 0:
        if s.poll(int(left * 1000) + 1):
            if accept(s.recv_multipart()):
                return True
    return False


def answers_until(s, deadline, accept):
    """As `receive_until` for the bus's answers, given to `accept` as fields; one that is not v2 raises."""
    return receive_until(s, deadline, lambda frames: accept(unpack(frames)))


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
        if answers_until(s, started + 3, lambda f: len(f) >= 5 and f[1:3] == [b"REPLY", rid] and f[4] == b"ok"):
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
    answers_until(client, time.monotonic() + 30, take)
    answers_until(client, time.monotonic() + 0.5, lambda f: take(f) and False)  # a second answer would show
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


def error_of(frame):
    """An ERROR's error object, or {} when it is not one."""
    try:
        error = json.loads(frame)
    except ValueError:
        return {}
    return error if isinstance(error, dict) else {}


def refusal_problems(cluster):
    """The bus's answers to bad framing: a v1 message gets a v1 ERROR `unsupported_protocol` naming SKB2C and SKB2W;
    a truncated envelope and a wrong split get `malformed_message`."""
    fields = [CLIENT, b"REQUEST", b"bad-frames", b"", b"", b"echo", b"5000", b'{"text":"x"}']
    cases = [("a v1 REQUEST", [b"SKB1C"] + fields[1:], "unsupported_protocol"),
             ("a v1 READY", [b"SKB1W", b"READY", b'{"name":"fz","capacity":1,"skills":[]}'], "unsupported_protocol"),
             ("a truncated envelope", [envelope(CLIENT, fields[1:7])[:-2], fields[7]], "malformed_message"),
             ("parameters inside the envelope and a frame after it", [envelope(CLIENT, fields[1:]), b"x"],
              "malformed_message")]
    s, problems = cluster.dealer(), []
    for what, frames, code in cases:
        s.send_multipart(frames)
        got = []
        receive_until(s, time.monotonic() + 5, lambda f: got.append(f) is None)
        if not got:
            problems.append(f"{what}: no answer")
            continue
        answer = got[0]
        if frames[0] in V1:  # answered in v1 form: one field per frame, the request id as sent
            error = error_of(answer[-1])
            right = (answer[:-1] == [frames[0], b"ERROR"] + ([frames[2]] if frames[0] == b"SKB1C" else [])
                     and error.get("code") == code and all(h in str(error.get("message")) for h in ("SKB2C", "SKB2W")))
        else:
            try:
                answer = unpack(answer)
            except ValueError as e:
                problems.append(f"{what}: the answer is not v2 ({e}): {answer}")
                continue
            right = answer[:2] == [CLIENT, b"ERROR"] and len(answer) == 4 and error_of(answer[3]).get("code") == code
        if not right:
            problems.append(f"{what}: answered {answer}, not ERROR {code}")
    s.close()
    return len(cases), problems


def fuzz(cluster, seconds):
    """Random and mutated frames and mis-encoded v2 envelopes on the bus, raw TCP junk at the bus and feed ports."""
    deadline = time.monotonic() + seconds
    rng = random.Random(13)
    sent = [0, 0, 0]  # messages, junk TCP connections, mis-encoded envelopes (among the messages)
    checked, problems = refusal_problems(cluster)
    # As fields: packed, then mutated frame by frame or encoded wrongly. The last one has lengths of 255 and more.
    valid = [[CLIENT, b"REQUEST", b"fz", str(uuid.uuid4()).encode(), b"", b"echo", b"5000", b'{"text":"x"}'],
             [WORKER, b"READY", b'{"name":"fz","capacity":1,"skills":[]}'],
             [CLIENT, b"ROUND", b"r", b"round", b"", b"1000", b'{"invoke":{"skill":"echo"}}'],
             [WORKER, b"RESULT", b"i1", b"ok", b"{}"], [CLIENT, b"CANCEL", b"x"], [WORKER, b"HEARTBEAT"],
             [WORKER, b"HEARTBEAT", b"1000", b'{"digest":"0","epoch":"0","seq":0}'],
             [CLIENT, b"REQUEST", b"r" * 300, b"o" * 255, b"", b"e" * 260, b"", b"{}"]]

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

    def misencode(fields):
        """v2's own ways of being wrong: a split off the table, a length past the end, 0xFF lengths, a v1 header."""
        header, first = fields[0], TO_BUS[fields[0]][fields[1]]
        first = len(fields) if first is None else min(first, len(fields))
        inside, rest, choice = fields[1:first], list(fields[first:]), rng.randrange(4)
        if choice == 0:  # split elsewhere: opaque fields in the envelope, or enveloped ones (the command too) as frames
            split = rng.choice([k for k in range(1, len(fields) + 1) if k != first])
            return [envelope(header, fields[1:split])] + list(fields[split:])
        if choice == 3:  # a v1 header: on the v1 frames, or on a v2 envelope
            old = b"SKB1" + header[4:]
            return [old] + list(fields[1:]) if rng.random() < 0.5 else [old + envelope(b"", inside)] + rest
        i = rng.randrange(len(inside))  # the field whose length is wrong
        before, field, after = envelope(header, inside[:i]), inside[i], envelope(b"", inside[i + 1:])
        if choice == 1:  # a length that runs past the end of the envelope
            n = len(field) + len(after) + rng.randint(1, 300)
            prefix = bytes([n]) if n < 255 else b"\xff" + n.to_bytes(4, "big")
        else:  # 0xFF long lengths: the right one, the largest, a random one, or one cut short at the envelope's end
            kind = rng.randrange(4)
            if kind == 3:
                return [before + (b"\xff" + rng.randbytes(4))[:rng.randint(1, 4)]] + rest
            prefix = b"\xff" + [len(field), 0xFFFFFFFF, rng.getrandbits(32)][kind].to_bytes(4, "big")
        return [before + prefix + field + after] + rest

    def frames_worker():
        s = cluster.dealer()
        while time.monotonic() < deadline and sent[0] < 200_000:
            choice = rng.random()
            if choice < 0.25:
                frames = mutate(pack(rng.choice(valid)))
            elif choice < 0.5:
                frames = misencode(rng.choice(valid))
                sent[2] += 1
            else:
                frames = [rng.randbytes(rng.randint(0, 40)) for _ in range(rng.randint(1, 12))]
                if choice < 0.75:  # behind a real header, so that the junk reaches the envelope's reader
                    frames[0] = rng.choice([CLIENT, WORKER]) + frames[0]
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
    return (f"{sent[0]} fuzzed messages ({sent[2]} mis-encoded envelopes) and {sent[1]} junk TCP connections in "
            f"{seconds:.0f} s; {checked - len(problems)} of {checked} bad framings answered as the protocol says"), problems


def churn(cluster, seconds):
    """500 sockets connecting, asking, and disconnecting, in batches of 50."""
    made = 0
    deadline = time.monotonic() + max(seconds, 5)
    while made < 500 and time.monotonic() < deadline:
        batch = [cluster.dealer(curve=(made // 50) % 2 == 0) for _ in range(50)]  # with keys, half have none
        for s in batch:
            # Without waiting: a keyless socket whose handshake the bus already refused has no pipe left (libzmq ends
            # the session on a mechanism mismatch), and a blocking send on it would wait for ever.
            try:
                s.send_multipart(pack([CLIENT, b"SKILLS", b"churn"]), flags=zmq.NOBLOCK)
            except zmq.Again:
                pass
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
        answers_until(s, time.monotonic() + 10,
                      lambda f: f[1:2] == [b"ERROR"] and got.append(f) is None)
        if not got or b"message_too_large" not in got[0][-1] or word not in got[0][-1]:
            problems.append(f"{what}: no message_too_large naming {word!r} ({got[:1]})")

    rid, frames = request("echo", {"text": "x" * (3 << 19)})  # 1.5 MiB of parameters
    expect_refusal(frames, b"maxMessageBytes", "a 1.5 MiB request")
    expect_refusal([envelope(CLIENT, [b"REQUEST"])] + [b"f" * 1024] * 1000, b"maxFrames", "1000 frames of 1 KiB")
    giant = b"\x00" * (8 << 20)
    s.send_multipart(request("echo", {})[1][:1] + [giant], copy=False)  # over the hard cap: libzmq drops the connection
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
    """Frames of 1 MiB in one message: refused as soon as it passes the limits, the rest discarded as it arrives."""
    frames = 1000 if seconds >= 10 else 100
    s = cluster.dealer()
    block = b"\x00" * (1 << 20)
    s.send_multipart([envelope(CLIENT, [b"REQUEST"])] + [block] * frames, copy=False)
    got = []
    answers_until(s, time.monotonic() + 30, lambda f: f[1:2] == [b"ERROR"] and got.append(f) is None)
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
        r.send_multipart(pack([WORKER, b"READY", json.dumps({"name": "alpha", "capacity": 1, "skills": [
            {"identifier": "text.stats", "parameters": [{"name": "text", "type": "string"}]}]}).encode()]))
        got = []
        answers_until(r, time.monotonic() + 2, lambda f: got.append(f) is None)
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
        answers_until(client, time.monotonic() + 5,
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
    answers_until(client, started + 15, lambda f: f[1] == b"REPLY" and f[2] in ids and codes.append(
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
    "giant-multipart": (giant_multipart, True),
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
        rss_limit = GIANT_RSS_LIMIT_MIB if name == "giant-multipart" else RSS_LIMIT_MIB
        if peak > rss_limit: problems.append(f"RSS peak {peak:.0f} MiB > {rss_limit}")
        if settled > rss_limit: problems.append(f"RSS after the fault {settled:.0f} MiB > {rss_limit}")
        if check_p99 and p99 > max(P99_LIMIT_MS, QUIET_FACTOR * quiet_p99):
            problems.append(f"probe p99 {p99:.1f} ms > {P99_LIMIT_MS} (and over {QUIET_FACTOR}x its {quiet_p99:.1f} ms without the fault)")
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
