"""warmd under systemd's protocols without systemd as PID 1: socket activation through
systemd-socket-activate, and sd_notify messages (READY, STATUS, WATCHDOG, RELOADING,
STOPPING) captured on a test NOTIFY_SOCKET (P1-5)."""

import os
import shutil
import signal
import socket
import stat
import subprocess
import time

from warmd_harness import (SHARED, START_TIMEOUT, WARMD, DaemonTest, NotifyListener, main, pb,
                           pbg, grpc, write_model)

MODEL = os.path.join(SHARED, "stories260K.gguf") if SHARED else ""

ACTIVATE = shutil.which("systemd-socket-activate")


class SystemdTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.notify = NotifyListener(os.path.join(self.tmp, "notify.sock"))

    def tearDown(self):
        self.notify.close()
        super().tearDown()

    def test_notify_lifecycle(self):
        d = self.daemon(env={"NOTIFY_SOCKET": self.notify.path, "WATCHDOG_USEC": "200000"})
        write_model(os.path.join(d.models, "m1.gguf"))
        d.start()
        self.assertTrue(self.notify.wait_for("READY=1"), self.notify.lines())
        status = [l for l in self.notify.lines() if l.startswith("STATUS=")]
        self.assertTrue(status and "1 models available" in status[0], status)
        # Pings every WATCHDOG_USEC/2 while every loop progresses.
        self.assertTrue(self.notify.wait_for("WATCHDOG=1"))
        end = time.monotonic() + START_TIMEOUT
        while sum(l == "WATCHDOG=1" for l in self.notify.lines()) < 3 and time.monotonic() < end:
            time.sleep(0.05)
        self.assertGreaterEqual(sum(l == "WATCHDOG=1" for l in self.notify.lines()), 3)
        # SIGHUP: RELOADING=1, a rescan, READY=1 again with the new count.
        write_model(os.path.join(d.models, "m2.gguf"))
        d.proc.send_signal(signal.SIGHUP)
        self.assertTrue(self.notify.wait_for("RELOADING=1"))
        self.assertTrue(self.notify.wait_for("STATUS=serving on " + d.socket + ": 2 models"))
        # SIGTERM: STOPPING=1, exit 0.
        self.assertEqual(d.stop(), 0, d.text())
        self.assertTrue(self.notify.wait_for("STOPPING=1"))
        lines = self.notify.lines()
        self.assertLess(lines.index("READY=1"), lines.index("STOPPING=1"))
        self.assertNotIn("READY=1", lines[lines.index("STOPPING=1"):])

    def test_preload_before_ready(self):
        if not os.path.exists(MODEL):
            self.skipTest("stories260K.gguf not found under WARM_SHARED_MODELS")
        d = self.daemon(config="preload = stories, nope\n",
                        env={"NOTIFY_SOCKET": self.notify.path})
        shutil.copy(MODEL, os.path.join(d.models, "stories.gguf"))
        d.start()
        self.assertTrue(self.notify.wait_for("READY=1"))
        self.assertIn("STATUS=loading model stories", self.notify.lines())
        self.assertTrue(any(l.startswith("EXTEND_TIMEOUT_USEC=") for l in self.notify.lines()))
        text = d.text()
        self.assertLess(text.index("loaded model 'stories'"), text.index("listening on"))
        self.assertIn("preload: model 'nope' not found", text)
        models = d.stub().ListModels(pb.ListModelsRequest()).models
        self.assertTrue(models[0].loaded)
        self.assertIn("1 loaded", [l for l in self.notify.lines() if l.startswith("STATUS=")][-1])
        self.assertEqual(d.stop(), 0)

    def test_watchdog_stops_while_a_loop_is_wedged(self):
        """P1-5: a model loop that makes no progress stops the WATCHDOG=1 pings; they
        resume once it moves again."""
        if not os.path.exists(MODEL):
            self.skipTest("stories260K.gguf not found under WARM_SHARED_MODELS")
        d = self.daemon(env={"NOTIFY_SOCKET": self.notify.path, "WATCHDOG_USEC": "400000",
                             "WARM_TEST_STALL_USEC": "2500000"})
        shutil.copy(MODEL, os.path.join(d.models, "stories.gguf"))
        d.start()
        st = d.stub()
        st.LoadModel(pb.LoadModelRequest(model="stories"))
        self.assertTrue(self.notify.wait_for("WATCHDOG=1"))
        it = st.Generate(pb.GenerateRequest(model="stories", tokens=[1], max_tokens=2,
                                            sampling=pb.Sampling(temperature=0)))
        next(it)  # the first token; the loop now stalls before its next decode step
        end = time.monotonic() + START_TIMEOUT
        while "made no progress" not in d.text() and time.monotonic() < end:
            time.sleep(0.05)
        self.assertIn("watchdog: 'model loop 'stories'' made no progress", d.text())
        n = sum(l == "WATCHDOG=1" for l in self.notify.lines())
        time.sleep(0.8)  # two watchdog periods without a ping
        self.assertEqual(sum(l == "WATCHDOG=1" for l in self.notify.lines()), n)
        list(it)  # the stall ends, the job finishes
        end = time.monotonic() + START_TIMEOUT
        while sum(l == "WATCHDOG=1" for l in self.notify.lines()) == n and time.monotonic() < end:
            time.sleep(0.05)
        self.assertGreater(sum(l == "WATCHDOG=1" for l in self.notify.lines()), n)
        self.assertEqual(d.stop(), 0)

    def test_no_watchdog_without_request(self):
        d = self.daemon(env={"NOTIFY_SOCKET": self.notify.path})
        d.env.pop("WATCHDOG_USEC", None)
        d.start()
        self.assertTrue(self.notify.wait_for("READY=1"))
        time.sleep(0.5)
        self.assertNotIn("WATCHDOG=1", self.notify.lines())
        self.assertEqual(d.stop(), 0)

    def test_socket_activation(self):
        if not ACTIVATE:
            self.skipTest("systemd-socket-activate not installed")
        path = os.path.join(self.tmp, "activated.sock")
        d = self.daemon(socket_path=os.path.join(self.tmp, "unused.sock"),
                        env={"NOTIFY_SOCKET": self.notify.path})
        write_model(os.path.join(d.models, "act.gguf"))
        # systemd-socket-activate binds PATH and execs warmd on the first connection,
        # passing the listening socket as fd 3 (LISTEN_FDS=1) and only the -E variables.
        d.args = [ACTIVATE, "-l", path, "-E", "NOTIFY_SOCKET", *d.args]
        d.start(wait=False)
        end = time.monotonic() + START_TIMEOUT
        while not os.path.exists(path) and time.monotonic() < end:
            time.sleep(0.02)
        ch = grpc.insecure_channel("unix:" + path)
        # the path exists from bind(); connections are refused until listen() follows:
        # wait_for_ready retries them (failing fast, the test once saw UNAVAILABLE)
        r = pbg.WarmStub(ch).GetInfo(pb.GetInfoRequest(), timeout=START_TIMEOUT,
                                     wait_for_ready=True)
        self.assertEqual(r.models_available, 1)
        self.assertEqual(r.peer.pid, os.getpid())
        self.assertIn("socket-activated", d.text())
        self.assertTrue(self.notify.wait_for("READY=1"))
        self.assertFalse(os.path.exists(d.socket), "warmd must not bind its own socket")
        ch.close()
        self.assertEqual(d.stop(), 0, d.text())
        # The activated socket belongs to systemd: warmd leaves it in place.
        self.assertTrue(stat.S_ISSOCK(os.lstat(path).st_mode))

    def test_activation_rejects_wrong_fds(self):
        """Two sockets, or a datagram socket, from the service manager: refuse to start."""
        if not ACTIVATE:
            self.skipTest("systemd-socket-activate not installed")
        a, b = os.path.join(self.tmp, "a.sock"), os.path.join(self.tmp, "b.sock")
        cmd = [ACTIVATE, "-l", a, "-l", b, WARMD, "--config", "/dev/null",
               "--models-dir", self.tmp]
        p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        # whatever fails below, the activator goes (left running, it held the test's
        # output open and ctest waited for it until its own timeout)
        self.addCleanup(lambda: p.poll() is None and (p.kill(), p.wait()))
        # the path exists from bind(); a connection is refused until listen() follows
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        end = time.monotonic() + START_TIMEOUT
        while True:
            try:
                s.connect(a)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > end:
                    raise
                time.sleep(0.02)
        _, err = p.communicate(timeout=START_TIMEOUT)
        s.close()
        self.assertEqual(p.returncode, 1, err)
        self.assertIn("expected exactly one", err)


if __name__ == "__main__":
    main()
