"""Hostile and careless clients (issue: no client can crash warmd, exhaust its memory or
lock others out). The attacker runs tests/e2e/h2_attack.py (python3-h2) as uid 65534
(setpriv) so its caps are its own; the honest client is this process (root). Every test
measures the daemon's idle RSS and an honest GetInfo's idle latency first, in the same
test, and bounds what the attack may add as a ratio or a stated number of bytes. Needs
root (setpriv, chmod of the socket) and python3-h2; skipped otherwise."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time

from warmd_harness import BIN, DaemonTest, START_TIMEOUT, grpc, main, metric, pb

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import warm_client  # noqa: E402

C = grpc.StatusCode
HERE = os.path.dirname(os.path.abspath(__file__))
ATTACK = os.path.join(HERE, "h2_attack.py")
MKMODEL = os.path.join(BIN, "warm-mkmodel")
INFO_LOOP = os.path.join(BIN, "..", "tests", "warm-info-loop")
NOBODY = 65534
MIB = 1 << 20
# What an attack may add to the daemon's RSS above idle in these tests, whose caps are
# max_pending_bytes_per_uid = 8M and max_pending_bytes = 16M: the caps, gRPC's and the
# allocator's overhead on them, and the relays' buffers.
RSS_BOUND = 96 * MIB
# The churn test: seconds of fresh-connection calls per client, idle and under churn, and
# each call's deadline (within which the clients wait for a full listen backlog to drain).
IDLE_SECONDS = 2.0
CHURN_SECONDS = 5.0
CALL_DEADLINE = 5.0


def have_h2():
    r = subprocess.run(["/usr/bin/python3", "-c", "import h2"], capture_output=True)
    return r.returncode == 0


def sanitized(pid):
    with open(f"/proc/{pid}/maps") as f:
        return "libasan" in f.read()


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    """The daemon's peak RSS while an attack runs, sampled every 20 ms."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0, threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, rss(self.pid))
            except OSError:
                return
            time.sleep(0.02)

    def done(self):
        self.stop.set()
        self.t.join()
        return self.peak


class AbuseTest(DaemonTest):
    CONFIG = ("max_pending_bytes_per_uid = 8M\nmax_pending_bytes = 16M\nthreads = 1\n"
              "parallel = 2\n")

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv (the attacker runs as uid 65534)")
        if not have_h2():
            self.skipTest("python3-h2 is not installed (scripts/deps.sh installs it)")
        if not os.path.exists(MKMODEL):
            self.skipTest("warm-mkmodel not built")

    def start(self, config="", model_args=()):
        d = self.daemon(config=self.CONFIG + config)
        subprocess.run([MKMODEL, "--arch", "llama", "--seed", "3", *model_args, "-o",
                        os.path.join(d.models, "m.gguf")], check=True, capture_output=True,
                       timeout=300)
        d.start()
        os.chmod(d.socket, 0o666)  # the attacker's uid may connect; policy allows anyone
        self.d, self.st = d, d.stub()
        self.st.Tokenize(pb.TokenizeRequest(model="m", text="warm up the model"))
        self.idle_rss = rss(d.proc.pid)
        self.idle_latency = self.latency()
        return d

    def latency(self, n=5):
        """Median seconds of an honest GetInfo on a fresh connection."""
        out = []
        for _ in range(n):
            ch = self.d.channel()
            t0 = time.monotonic()
            r = grpc_call(ch)
            out.append(time.monotonic() - t0)
            ch.close()
            self.assertEqual(r.api_version, "warm.v1")
        return sorted(out)[len(out) // 2]

    def attack(self, *args, timeout=120, background=False):
        cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
               "/usr/bin/python3", ATTACK, self.d.socket, *map(str, args)]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if background:
            return p
        return self.result(p, timeout)

    def result(self, p, timeout=120):
        out, err = p.communicate(timeout=timeout)
        self.assertEqual(p.returncode, 0, err)
        r = json.loads(out.strip().splitlines()[-1])
        if "skip" in r:
            self.skipTest(r["skip"])
        return r

    def metrics(self):
        # a fresh connection: the tests close idle ones (as a client, reconnect)
        from warmd_harness import pbg
        ch = self.d.channel()
        try:
            return pbg.WarmStub(ch).Metrics(pb.MetricsRequest(), timeout=30).text
        finally:
            ch.close()

    def assert_recovered(self, peak, what):
        """The attack's memory stayed bounded, the daemon lives and serves promptly."""
        self.assertIsNone(self.d.proc.poll(), self.d.text()[-3000:])
        if sanitized(self.d.proc.pid):
            # ASan holds freed memory in its quarantine (256 MiB by default): RSS says
            # nothing there; the Release suite asserts the bound, this run the memory safety
            print(f"{what}: ASan build, RSS bound not asserted (peak {peak / MIB:.0f} MiB)",
                  file=sys.stderr)
            peak = self.idle_rss
        self.assertLess(peak - self.idle_rss, RSS_BOUND,
                        f"{what}: RSS {self.idle_rss / MIB:.0f} MiB idle, "
                        f"{peak / MIB:.0f} MiB peak")
        lat = self.latency()
        # a ratio to the idle figure of this run, with slack for a loaded CI machine
        self.assertLess(lat, 20 * self.idle_latency + 1.0, f"{what}: GetInfo {lat:.3f} s, "
                        f"idle {self.idle_latency:.3f} s")
        print(f"{what}: RSS idle {self.idle_rss / MIB:.1f} MiB, peak {peak / MIB:.1f} MiB; "
              f"GetInfo idle {self.idle_latency * 1e3:.1f} ms, after {lat * 1e3:.1f} ms",
              file=sys.stderr)

    def wait_metric(self, name, at_least):
        end = time.monotonic() + START_TIMEOUT
        while time.monotonic() < end:
            v = metric(self.metrics(), name)
            if v >= at_least:
                return v
            time.sleep(0.05)
        return metric(self.metrics(), name)

    # ---- item 3: memory ---------------------------------------------------------------

    def test_incomplete_requests(self):
        """Requests of 4 MB that never end, on 4 connections x 16 streams (256 MB if
        gRPC held them all): the uid's pending bytes are capped, the connections are
        closed after request_timeout, and RSS comes back."""
        self.start("request_timeout = 3s\n")
        s = RssSampler(self.d.proc.pid)
        r = self.attack("incomplete", 4, 16, 4 * MIB - 64, 8.0)
        peak = s.done()
        self.assertLess(r["sent"], 64 * MIB, r)  # the daemon stopped reading
        self.assertEqual(r["closed"], 4, r)
        self.assertGreaterEqual(metric(self.metrics(), "warmd_connections_abuse_closed_total"), 4)
        self.assertIn("did not arrive whole within request_timeout", self.d.text())
        self.assert_recovered(max(peak, rss(self.d.proc.pid)), "incomplete requests")

    def test_pipelined_never_read(self):
        """Tokenize calls of 256 KiB whose answers (~256 KiB each) are never read, on 8
        connections x 64 streams (256 MiB of requests and answers): bounded by the uid's
        pending caps."""
        self.start("slow_reader_timeout = 3s\n")
        s = RssSampler(self.d.proc.pid)
        r = self.attack("pipeline", 8, 64, 256 << 10, 6.0)
        peak = s.done()
        self.assertLessEqual(r["closed"], r["conns"])
        self.assert_recovered(peak, "pipelined calls never read")

    def test_rapid_reset(self):
        """HTTP/2 rapid reset: the connection is closed after max_stream_resets."""
        self.start("max_stream_resets = 100\n")
        s = RssSampler(self.d.proc.pid)
        r = self.attack("reset", 2, 5000)
        peak = s.done()
        self.assertEqual(r["closed"], 2, r)
        self.assertLess(r["sent"], 2 * 5000, r)
        self.assertGreaterEqual(metric(self.metrics(), "warmd_connections_abuse_closed_total"), 2)
        self.assertIn("rapid reset", self.d.text())
        self.assert_recovered(peak, "rapid reset")

    # ---- item 4: connections ----------------------------------------------------------

    def test_connection_caps_and_idle(self):
        """A uid's silent connections stop at max_connections_per_uid (refused at
        accept, one log line), others are still served, and idle connections close."""
        self.start("max_connections_per_uid = 20\nmax_connections = 64\n"
                   "connection_idle_timeout = 2s\n")
        p = self.attack("silent", 60, 4.0, background=True)
        time.sleep(0.5)
        # while the attacker holds its 20, this uid is served
        self.assertEqual(grpc_call(self.d.channel()).api_version, "warm.v1")
        r = self.result(p)
        self.assertEqual(r["opened"], 60, r)
        self.assertGreaterEqual(r["refused"], 40, r)
        self.assertLessEqual(r["refused"], 60 - 20 + 2, r)  # +2: the idle closes can race
        self.assertGreaterEqual(metric(self.metrics(), "warmd_connections_limited_total"), 40)
        log = self.d.text()
        lines = [l for l in log.splitlines() if "max_connections_per_uid reached" in l]
        self.assertLessEqual(len(lines), 2, "\n".join(lines))
        # a connection that made a call and then went quiet is closed too
        ch = self.d.channel()
        self.assertEqual(grpc_call(ch).api_version, "warm.v1")
        before = metric(self.metrics(), "warmd_connections_idle_closed_total")
        self.assertGreaterEqual(self.wait_metric("warmd_connections_idle_closed_total",
                                                 before + 1), before + 1,
                                "\n".join(l for l in self.metrics().splitlines()
                                          if l.startswith("warmd_conn")))
        ch.close()
        self.assert_recovered(rss(self.d.proc.pid), "silent connections")

    def test_total_cap(self):
        self.start("max_connections = 12\nmax_connections_per_uid = 100\n")
        r = self.attack("silent", 30, 1.5)
        self.assertGreaterEqual(r["refused"], 30 - 12, r)
        self.assertGreaterEqual(metric(self.metrics(), "warmd_connections_limited_total"), 18)
        self.assertIn("max_connections reached", self.d.text())

    # ---- item 5: refused users' churn ------------------------------------------------

    def fresh_calls(self, seconds):
        """GetInfo on a fresh connection with a deadline, again and again for seconds,
        through the Python client and then through libwarm: {client: (answered, calls,
        last failure)}."""
        out = {}
        ok, n, last, end = 0, 0, "", time.monotonic() + seconds
        while time.monotonic() < end:
            n += 1
            try:
                with warm_client.Client(self.d.socket, timeout=CALL_DEADLINE) as c:
                    self.assertEqual(c.info().api_version, "warm.v1")
                ok += 1
            except warm_client.WarmError as e:
                last = f"{e.code}: {e.message}"
        out["python"] = (ok, n, last)
        p = subprocess.run([INFO_LOOP, self.d.socket, str(seconds),
                            str(int(CALL_DEADLINE * 1000))], capture_output=True, text=True,
                           timeout=seconds + 3 * CALL_DEADLINE + 60)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout)
        out["libwarm"] = (r["ok"], r["ok"] + r["failed"], r["last_error"])
        return out

    def refused(self):
        """Connections refused so far; -1 when the call failed."""
        try:
            with warm_client.Client(self.d.socket, timeout=CALL_DEADLINE) as c:
                return metric(c.metrics(), "warmd_connections_refused_total")
        except warm_client.WarmError:
            return -1

    def test_refused_churn(self):
        """Two processes of a uid the policy refuses connect and close in a loop as fast as
        they can (round 2's F4: they filled the listen backlog, and an allowed user's
        connect failed with EAGAIN 56-79 % of the time on 2 cores): the allowed user's
        GetInfo on fresh connections, through the Python client and libwarm, is answered
        at least 95 % as often as with no churn, measured first in this test; the
        refusals are logged once per interval."""
        if not os.path.exists(INFO_LOOP):
            self.skipTest("warm-info-loop not built")
        self.start("allowed_uids = 0\n")
        idle = self.fresh_calls(IDLE_SECONDS)
        procs = [self.attack("churn", 2 * CHURN_SECONDS + 1.0, background=True)
                 for _ in range(2)]
        end = time.monotonic() + START_TIMEOUT  # the churners run before it counts
        while time.monotonic() < end and self.refused() < 1000:
            time.sleep(0.05)
        busy = self.fresh_calls(CHURN_SECONDS)
        n = sum(self.result(p)["connects"] for p in procs)
        self.assertGreater(n, 1000, "the churn did not run")
        lines = [l for l in self.d.text().splitlines() if "refused connection" in l]
        self.assertLessEqual(len(lines), 4, f"{len(lines)} refusal lines for {n} connects")
        self.assertGreaterEqual(metric(self.metrics(), "warmd_connections_refused_total"), n // 2)
        for client in ("python", "libwarm"):
            (ok0, n0, _), (ok, calls, _) = idle[client], busy[client]
            print(f"churn, {client}: {ok}/{calls} calls answered ({100 * ok / calls:.1f} %) "
                  f"beside {n} refused connects; idle {ok0}/{n0}", file=sys.stderr)
        for client in ("python", "libwarm"):
            (ok0, n0, last0), (ok, calls, last) = idle[client], busy[client]
            self.assertGreater(ok0, 0, f"{client} idle: {last0}")
            self.assertGreaterEqual(ok / calls, 0.95 * ok0 / n0,
                                    f"{client}: {ok}/{calls} answered under churn, {ok0}/{n0} "
                                    f"idle; last failure: {last}")

    # ---- item 10: fairness ------------------------------------------------------------

    def test_streams_never_read_do_not_starve_others(self):
        """16 Generate streams of one uid that never reads wait in the queue; an honest
        request of another uid is admitted as soon as a slot frees, not after all 16."""
        self.start("slow_reader_timeout = 4s\nmax_queued_per_uid = 64\n",
                   ("--n-embd", "256", "--n-layer", "4", "--n-ff", "768"))
        greedy = pb.Sampling(temperature=0)
        n_tok = 96
        t0 = time.monotonic()
        list(self.st.Generate(pb.GenerateRequest(model="m", prompt="Once upon", sampling=greedy,
                                                 max_tokens=n_tok)))
        solo = time.monotonic() - t0  # one request's whole time, idle
        p = self.attack("noread", 16, n_tok, 30.0, background=True)
        time.sleep(0.3)
        end = time.monotonic() + START_TIMEOUT
        while time.monotonic() < end and metric(self.metrics(), "warmd_queue_depth") < 4:
            time.sleep(0.02)
        t0 = time.monotonic()
        summary = None
        for ev in self.st.Generate(pb.GenerateRequest(model="m", prompt="Once upon",
                                                      sampling=greedy, max_tokens=n_tok),
                                   timeout=120):
            if ev.HasField("summary"):
                summary = ev.summary
        waited = summary.queue_usec / 1e6
        # one request's own time under the same contention (the attacker's streams share the
        # cores with it as they share them with each other): the length of one round
        own = (summary.prefill_usec + summary.decode_usec) / 1e6
        print(f"fairness: solo {solo:.2f} s, honest queue wait {waited:.2f} s behind 16 "
              f"unread streams, its own run {own:.2f} s, total {time.monotonic() - t0:.2f} s",
              file=sys.stderr)
        # FIFO would wait for 16 / parallel = 8 of the attacker's requests, rounds as long as
        # its own run; a fair queue about one (seen: 0.9-1.0 under ASan). Both measured in
        # this run, so the bound holds on a slow, busy or sanitized machine as on a fast one.
        self.assertLess(waited, 4 * max(own, solo) + 0.5)
        p.kill()
        p.wait()


def grpc_call(ch, timeout=30):
    from warmd_harness import pbg
    return pbg.WarmStub(ch).GetInfo(pb.GetInfoRequest(), timeout=timeout)


if __name__ == "__main__":
    main()
