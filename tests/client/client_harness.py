"""Helpers of the client tests: a real warmd (tests/e2e/warmd_harness.py) with the
stories260K model copied into its temporary models directory as "stories", and warmctl
runs whose --json output is parsed back.

Environment (set by CTest): WARM_BIN, WARM_PYTHON, WARM_SHARED_MODELS as for the e2e
tests, WARM_TEST_BIN (test executables), WARM_CLIENT_PYTHON (client/python)."""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from warmd_harness import BIN, SHARED, SKIP, DaemonTest, grpc, main, pb  # noqa: E402,F401

WARMCTL = os.path.join(BIN, "warmctl")
MODEL_FILE = os.path.join(SHARED, "stories260K.gguf") if SHARED else ""
MODEL = "stories"
RUN_TIMEOUT = 300


class Result:
    def __init__(self, proc):
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def json(self):
        """The single JSON document of stdout."""
        lines = [l for l in self.out.splitlines() if l.strip()]
        assert len(lines) == 1, f"expected one JSON line, got {len(lines)}:\n{self.out}"
        return json.loads(lines[0])

    def events(self):
        """JSON lines (run/chat --json)."""
        return [json.loads(l) for l in self.out.splitlines() if l.strip()]

    def __repr__(self):
        return f"rc={self.rc}\nstdout:\n{self.out}\nstderr:\n{self.err}"


class ClientTest(DaemonTest):
    """A started daemon per test, with the model, and warmctl pointed at it."""

    config = "threads = 1\n"

    def setUp(self):
        super().setUp()
        if not os.path.exists(WARMCTL):
            self.skipTest("warmctl not built")

    def tearDown(self):
        super().tearDown()
        for d in self.daemons:
            log = getattr(d, "log", None)
            if log and not log.closed:
                log.close()

    def start(self, config=""):
        if not os.path.exists(MODEL_FILE):
            self.skipTest("stories260K.gguf not found under WARM_SHARED_MODELS")
        d = self.daemon(config=self.config + config)
        shutil.copy(MODEL_FILE, os.path.join(d.models, MODEL + ".gguf"))
        d.start()
        self.d = d
        return d

    def ctl(self, *args, rc=0, stdin=None, env=None, user=None, socket=True):
        cmd = [WARMCTL]
        if socket:
            cmd += ["--socket", self.d.socket]
        cmd += [str(a) for a in args]
        e = dict(os.environ, **(env or {}))
        e.pop("WARM_SOCKET", None) if socket else None
        kw = {}
        if user is not None:
            kw = dict(user=user, group=user, extra_groups=[])
        p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=e,
                           timeout=RUN_TIMEOUT, **kw)
        r = Result(p)
        # In a sanitizer build a report exits 1 too: never mistake it for EXIT_FAILED.
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
            self.assertNotIn(marker, r.err, f"{' '.join(cmd)}\n{r}")
        if rc is not None:
            self.assertEqual(r.rc, rc, f"{' '.join(cmd)}\n{r}")
        return r
