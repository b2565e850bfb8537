"""Shared helpers of the warmd end-to-end tests: start a real warmd on a temporary
socket, talk to it with Debian's grpcio and the stubs generated at build time, capture
sd_notify messages on a test NOTIFY_SOCKET, and stop it with a signal; run clients as
local users made for the test (UsersTest).

Environment (set by CTest): WARM_BIN (build/bin), WARM_PYTHON (generated stubs),
WARM_SHARED_MODELS (reference models)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

SKIP = 77

PYTHON_DIR = os.environ.get("WARM_PYTHON", "")
if PYTHON_DIR:
    sys.path.insert(0, PYTHON_DIR)
try:
    import grpc  # noqa: E402
    from warm.v1 import warm_pb2 as pb  # noqa: E402
    from warm.v1 import warm_pb2_grpc as pbg  # noqa: E402
except ImportError as e:  # pragma: no cover
    print(f"skipped: cannot import grpc or the generated stubs ({e}); "
          "run with Debian's /usr/bin/python3", file=sys.stderr)
    sys.exit(SKIP)

BIN = os.environ.get("WARM_BIN", os.path.join(os.path.dirname(__file__), "../../build/bin"))
WARMD = os.path.join(BIN, "warmd")
SHARED = os.environ.get("WARM_SHARED_MODELS", "")
# Startup under ASan or valgrind is slower; never a timing assertion, only a wait cap.
START_TIMEOUT = 30.0


class NotifyListener:
    """A datagram socket standing in for systemd's NOTIFY_SOCKET."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.2)
        self.messages = []
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while self.running:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self.messages.append(data.decode("utf-8", "replace"))

    def lines(self):
        with self.lock:
            return [l for m in self.messages for l in m.split("\n") if l]

    def wait_for(self, prefix, timeout=START_TIMEOUT):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(l.startswith(prefix) for l in self.lines()):
                return True
            time.sleep(0.02)
        return False

    def close(self):
        self.running = False
        self.thread.join()
        self.sock.close()


class Daemon:
    """A warmd process on a socket in its own temporary directory."""

    def __init__(self, tmp, args=(), config="", env=None, socket_path=None, models=None):
        self.tmp = tmp
        self.socket = socket_path or os.path.join(tmp, "warmd.sock")
        self.models = models or os.path.join(tmp, "models")
        os.makedirs(self.models, exist_ok=True)
        self.config = os.path.join(tmp, "warmd.conf")
        with open(self.config, "w") as f:
            f.write(f"socket = {self.socket}\nmodels_dir = {self.models}\n"
                    f"state_dir = {tmp}\nlog_level = debug\n" + config)
        self.log_path = os.path.join(tmp, "warmd.log")
        # WARMD_WRAPPER, e.g. "valgrind --error-exitcode=99 --leak-check=full", runs the
        # daemon under a tool (P0-10's valgrind run).
        wrapper = os.environ.get("WARMD_WRAPPER", "").split()
        self.args = [*wrapper, WARMD, "--config", self.config, *args]
        self.env = dict(os.environ, **(env or {}))
        self.proc = None

    def start(self, wait=True):
        # the daemon writes the log through its own copy of the descriptor; ours is closed
        # at once, so a test that kills the daemon leaves nothing open
        with open(self.log_path, "ab") as log:
            self.log_start = log.tell()  # a second run appends to the same log
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                         env=self.env)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self):
        end = time.monotonic() + START_TIMEOUT
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"warmd exited with {self.proc.returncode}:\n{self.text()}")
            if "listening on" in self.text()[self.log_start:]:
                return
            time.sleep(0.02)
        raise AssertionError("warmd did not start:\n" + self.text())

    def text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def channel(self, **opts):
        # A local subchannel pool: a new channel never reuses a connection to an earlier
        # daemon on the same path.
        options = [("grpc.max_receive_message_length", 64 << 20),
                   ("grpc.use_local_subchannel_pool", 1)] + list(opts.items())
        return grpc.insecure_channel("unix:" + self.socket, options=options)

    def stub(self):
        return pbg.WarmStub(self.channel())

    def stop(self, sig=signal.SIGTERM, timeout=START_TIMEOUT):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("warmd did not stop:\n" + self.text())
        return rc

    def fds(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


def write_model(path, payload=b""):
    """A small model the registry serves (warm-mkmodel's; the registry reads and checks
    every file as the loader would), payload appended as trailing bytes (GGUF readers
    ignore them)."""
    subprocess.run([os.path.join(BIN, "warm-mkmodel"), "--arch", "llama", "--n-embd", "16",
                    "--n-layer", "1", "--n-head", "1", "--n-ff", "16", "--n-vocab", "260",
                    "-o", path], check=True, capture_output=True, timeout=120)
    with open(path, "ab") as f:
        f.write(payload)


def collect(stream):
    """Drains a Generate/Chat stream: (token ids, text, summary event); progress events
    are left out."""
    ids, text, summary = [], "", None
    for ev in stream:
        if ev.HasField("token"):
            if ev.token.id >= 0:
                ids.append(ev.token.id)
            text += ev.token.text
        elif ev.HasField("summary"):
            summary = ev.summary
    return ids, text, summary


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise KeyError(name)


class DaemonTest(unittest.TestCase):
    """A fresh temporary directory per test (0755 so other test users can reach it)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="warmd-e2e-")
        os.chmod(self.tmp, 0o755)
        self.daemons = []

    def tearDown(self):
        for d in self.daemons:
            if d.proc and d.proc.poll() is None:
                d.proc.kill()
                d.proc.wait()
            # Sanitizer reports end up in the log; fail loudly if any appeared.
            if d.proc and os.path.exists(d.log_path):
                text = d.text()
                for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                               "runtime error:"):
                    self.assertNotIn(marker, text, text)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def daemon(self, **kw):
        d = Daemon(self.tmp, **kw)
        self.daemons.append(d)
        return d

    def assertCode(self, fn, code, contains=None):
        with self.assertRaises(grpc.RpcError) as cm:
            r = fn()
            if hasattr(r, "__iter__") and not isinstance(r, (bytes, str)):
                list(r)
        self.assertEqual(cm.exception.code(), code, cm.exception.details())
        if contains:
            self.assertIn(contains, cm.exception.details())
        return cm.exception


def _sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("useradd") and shutil.which("setpriv"),
                     "needs root, useradd and setpriv")
class UsersTest(DaemonTest):
    """Tests whose clients run as local users of their own (setpriv). A subclass names
    GROUPS and USERS (name -> its supplementary groups; each user also gets a group of its
    own): they are made for the class, replacing any an interrupted run left behind, and
    deleted after it; ids[name] = (uid, gid). Each test writes CLIENT, a Python script, with
    a copy of the stubs where those users can read them; run_client() runs it as one."""

    GROUPS = ()
    USERS = {}
    CLIENT = ""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for g in cls.GROUPS:
            subprocess.run(["groupdel", g], capture_output=True)
            _sh("groupadd", g)
        cls.ids = {}
        for user, groups in cls.USERS.items():
            subprocess.run(["userdel", user], capture_output=True)
            subprocess.run(["groupdel", user], capture_output=True)
            cmd = ["useradd", "-M", "-U", "-s", "/usr/sbin/nologin"]
            if groups:
                cmd += ["-G", ",".join(groups)]
            _sh(*cmd, user)
            uid = subprocess.run(["id", "-u", user], capture_output=True, text=True, check=True)
            gid = subprocess.run(["id", "-g", user], capture_output=True, text=True, check=True)
            cls.ids[user] = (int(uid.stdout), int(gid.stdout))

    @classmethod
    def tearDownClass(cls):
        for user in cls.USERS:
            subprocess.run(["userdel", user], capture_output=True)
            subprocess.run(["groupdel", user], capture_output=True)
        for g in cls.GROUPS:
            subprocess.run(["groupdel", g], capture_output=True)
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        self.py = os.path.join(self.tmp, "py")
        shutil.copytree(PYTHON_DIR, self.py)
        self.client = os.path.join(self.tmp, "client.py")
        with open(self.client, "w") as f:
            f.write(self.CLIENT)
        for root, dirs, files in os.walk(self.tmp):
            for n in dirs:
                os.chmod(os.path.join(root, n), 0o755)
            for n in files:
                os.chmod(os.path.join(root, n), 0o644)

    def setpriv(self, user):
        """The command prefix that runs what follows as user: its uid, its primary group
        and its supplementary groups."""
        uid, gid = self.ids[user]
        return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups"]

    def run_client(self, user, *args, timeout=120):
        """CLIENT run as user with the stubs' directory and args (strings); the JSON it
        printed."""
        r = subprocess.run(self.setpriv(user) + [sys.executable, self.client, self.py, *args],
                           capture_output=True, text=True, timeout=timeout,
                           env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)


def main():
    unittest.main(verbosity=2)
