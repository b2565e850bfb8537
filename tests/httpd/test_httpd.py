"""warm-httpd end to end: a real warmd (stories260K as "stories", a generated chatml model as
"chatty") and a real warm-httpd running as its own uid (listed in trusted_proxy_uids), driven
by the official openai and ollama npm packages (pinned, installed into this test's scratch
directory) and by curl. Checked: models, streamed and whole chats and completions whose text
equals warmctl's greedy output, stop strings, usage and cached tokens, unsupported fields
refused by name, the Ollama calls and keep_alive 0 (one user's leaves the model another
user keeps), two local users in separate namespaces (clients run as other uids with
setpriv), a uid outside the policy refused, a client that
cannot be identified (warm-httpd in a network namespace of its own, socket-activated)
refused with 401 and then served with a `warmctl token create` token, the same server
identifying users through a socket-diagnostics socket handed in from the host's namespace
(what warm-httpd.socket does), bad Host, foreign Origin, 10 MB bodies, a client hanging up
mid-stream cancelling the generation in warmd, and the RPC overhead per streamed token.

Needs root (setpriv, unshare); npm for the SDK cases (skipped with a message without it)."""

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from warmd_harness import BIN, SHARED, DaemonTest, main, metric, pb  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
HTTPD = os.path.join(BIN, "warm-httpd")
WARMCTL = os.path.join(BIN, "warmctl")
MKMODEL = os.path.join(BIN, "warm-mkmodel")
BENCH = os.path.join(os.environ.get("WARM_TEST_BIN", os.path.join(BIN, "..", "tests")),
                     "warm-httpd-bench")
STORIES = os.path.join(SHARED, "stories260K.gguf") if SHARED else ""
NPM_PACKAGES = ["openai@6.30.1", "ollama@0.6.4", "@langchain/ollama@1.3.0", "@langchain/core@1.4.0"]
PROXY, ALICE, BOB, OUTSIDER = 65531, 65534, 65533, 65532
PROMPT, USER_MSG, N = "Once upon a time", "Hi", 12
WAIT = 60.0  # caps on polls, never timing assertions


def as_uid(uid):
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


class NpmClients:
    """openai and ollama from the npm registry, once per run, in a scratch directory."""
    dir = None
    why = None

    @classmethod
    def get(cls):
        if cls.dir or cls.why:
            return cls.dir
        npm = shutil.which("npm")
        if not npm or not shutil.which("node"):
            cls.why = "npm or node not found: the openai/ollama SDK cases are skipped"
            return None
        d = tempfile.mkdtemp(prefix="warm-httpd-npm-")
        atexit.register(shutil.rmtree, d, True)  # the packages are fetched once per run
        os.chmod(d, 0o755)
        p = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--ignore-scripts",
                            "--prefix", d, *NPM_PACKAGES], capture_output=True, text=True,
                           timeout=600)
        if p.returncode != 0:
            raise AssertionError(f"npm install {' '.join(NPM_PACKAGES)} failed:\n{p.stderr}")
        for f in os.listdir(HERE):
            if f.endswith(".mjs"):
                shutil.copy(os.path.join(HERE, f), d)
        cls.dir = d
        return d


class Httpd:
    """A warm-httpd process; port read back from its log."""

    def __init__(self, tmp, warmd_socket, args=(), uid=PROXY, activated=None):
        self.log_path = os.path.join(tmp, f"warm-httpd-{time.monotonic_ns()}.log")
        self.log = open(self.log_path, "wb")
        cmd = [HTTPD, f"--warmd-socket={warmd_socket}", "--log-level=debug",
               "--config=/dev/null", *args]
        if activated is None:
            self.proc = subprocess.Popen(as_uid(uid) + cmd + ["--listen=127.0.0.1:0"],
                                         stdout=self.log, stderr=subprocess.STDOUT)
        else:
            self.proc = activated(cmd, self.log)
        self.port = None
        end = time.monotonic() + WAIT
        while time.monotonic() < end and self.port is None:
            if self.proc.poll() is not None:
                raise AssertionError(f"warm-httpd exited {self.proc.returncode}:\n{self.text()}")
            for line in self.text().splitlines():
                if "listening on 127.0.0.1:" in line:
                    self.port = int(line.split("127.0.0.1:")[1].split()[0].rstrip(";"))
            time.sleep(0.02)
        if self.port is None:
            raise AssertionError("warm-httpd did not start:\n" + self.text())
        self.base = f"http://127.0.0.1:{self.port}"

    def text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(WAIT)
        self.log.close()
        return self.proc.returncode


class HttpdHarness(DaemonTest):
    """warmd with two models and warm-httpd in front, and the helpers the tests share."""

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("curl"):
            self.skipTest("needs root, setpriv and curl (clients run as other uids)")
        for f in (HTTPD, WARMCTL, MKMODEL):
            if not os.path.exists(f):
                self.skipTest(f"{f} not built")
        if not os.path.exists(STORIES):
            self.skipTest("stories260K.gguf not found under WARM_SHARED_MODELS")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.stop()
            self.assertNotIn("runtime error:", s.text())
            self.assertNotIn("AddressSanitizer", s.text())
        super().tearDown()

    def start(self, config="", httpd_args=(), activated=None, prepare=None):
        allowed = ",".join(str(u) for u in (0, PROXY, ALICE, BOB))
        d = self.daemon(config=f"threads = 1\nallowed_uids = {allowed}\n"
                               f"trusted_proxy_uids = {PROXY}\n" + config)
        shutil.copy(STORIES, os.path.join(d.models, "stories.gguf"))
        subprocess.run([MKMODEL, "--arch", "llama", "--chat-template", "chatml", "--seed", "7",
                        "-o", os.path.join(d.models, "chatty.gguf")],
                       check=True, capture_output=True, timeout=120)
        if prepare:
            prepare(d)  # more model files, before warmd reads the directory
        d.start()
        os.chmod(d.socket, 0o666)  # warmd's own policy decides (allowed_uids)
        self.d = d
        self.h = self.httpd(httpd_args, activated=activated)
        return d

    def httpd(self, args=(), **kw):
        h = Httpd(self.tmp, self.d.socket, args, **kw)
        self.servers.append(h)
        return h

    # ---- helpers ----

    def ctl(self, *args, stdin=None):
        p = subprocess.run([WARMCTL, "--socket", self.d.socket, *args], input=stdin,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        return [json.loads(l) for l in p.stdout.splitlines() if l.strip()]

    def greedy(self, *args, stdin=None):
        """warmctl's greedy text and summary (run or chat, --json)."""
        ev = self.ctl(*args, "--greedy", "-n", str(N), "--json", stdin=stdin)
        return "".join(e["token"]["text"] for e in ev if "token" in e), ev[-1]["summary"]

    def curl(self, path, body=None, uid=0, headers=(), method=None, data_file=None, base=None):
        """(status, body text) of one request, made by uid."""
        cmd = (as_uid(uid) if uid else []) + ["curl", "-s", "-o", "-", "-w", "\n%{http_code}",
                                              "--max-time", "300"]
        for h in headers:
            cmd += ["-H", h]
        if method:
            cmd += ["-X", method]
        if body is not None:
            cmd += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
        if data_file:
            cmd += ["--data-binary", "@" + data_file]
        cmd.append((base or self.h.base) + path)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=330)
        text, _, status = p.stdout.rpartition("\n")
        return int(status or 0), text

    def jcurl(self, path, body=None, status=200, **kw):
        st, text = self.curl(path, body, **kw)
        self.assertEqual(st, status, text)
        return json.loads(text)

    def metrics(self):
        return self.d.stub().Metrics(pb.MetricsRequest()).text

    def node(self, script, cfg):
        d = NpmClients.get()
        if not d:
            self.skipTest(NpmClients.why)
        p = subprocess.run(["node", os.path.join(d, script), json.dumps(cfg)], cwd=d,
                           capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, HOME=d))
        self.assertEqual(p.returncode, 0, f"{p.stderr}\n{self.h.text()[-3000:]}")
        return json.loads(p.stdout)

    def activated(self, with_diag):
        """Starts warm-httpd as systemd would: listening socket (and, with_diag, the
        socket-diagnostics netlink socket) made here, in the host's network namespace,
        passed as fds 3.. with LISTEN_FDS, and the server itself in a network namespace
        of its own (PrivateNetwork=yes)."""
        if not shutil.which("unshare"):
            self.skipTest("needs unshare")
        lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lst.bind(("127.0.0.1", 0))
        lst.listen(16)
        fds = [lst.fileno()]
        keep = [lst]
        if with_diag:
            nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4)  # NETLINK_SOCK_DIAG
            nl.bind((0, 0))
            fds.append(nl.fileno())
            keep.append(nl)
        self.addCleanup(lambda: [s.close() for s in keep])

        def launch(cmd, log):
            def child():
                for i, fd in enumerate(fds):
                    os.dup2(fd, 3 + i)
                    os.set_inheritable(3 + i, True)
            sh = ('LISTEN_PID=$$ LISTEN_FDS=%d exec unshare --net -- %s "$@"'
                  % (len(fds), " ".join(as_uid(PROXY))))
            return subprocess.Popen(["sh", "-c", sh, "sh", *cmd], stdout=log,
                                    stderr=subprocess.STDOUT, preexec_fn=child,
                                    pass_fds=range(3, 3 + len(fds)))
        return launch


class HttpdTest(HttpdHarness):
    # ---- the SDKs ----

    def test_openai_sdk(self):
        self.start()
        want_run, run_sum = self.greedy("run", "stories", PROMPT)
        want_chat, chat_sum = self.greedy("chat", "chatty", stdin=USER_MSG + "\n")
        stop = want_run.split()[3]   # a word in the middle of the greedy text
        out = self.node("openai_client.mjs", {"base": self.h.base + "/v1", "model": "stories",
                                              "chat_model": "chatty", "prompt": PROMPT,
                                              "user": USER_MSG, "n": N, "stop": stop})
        self.assertEqual(sorted(out["models"]), ["chatty", "stories"])
        self.assertEqual(out["chat"]["object"], "chat.completion")
        self.assertEqual(out["chat"]["text"], want_chat)
        self.assertEqual(out["chat_stream"]["text"], want_chat)
        self.assertEqual(out["chat_stream"]["roles"], ["assistant"])
        self.assertEqual(out["completion"]["text"], want_run)
        self.assertEqual(out["completion_stream"]["text"], want_run)
        self.assertEqual(out["completion"]["finish"], "length")
        for k in ("chat", "chat_stream"):
            u = out[k]["usage"]
            self.assertEqual(u["prompt_tokens"], chat_sum["prompt_tokens"], k)
            self.assertEqual(u["completion_tokens"], N, k)
            self.assertEqual(u["total_tokens"], chat_sum["prompt_tokens"] + N, k)
        # warmctl ran the same prompts first (as root, like the SDK here): the bridge's
        # requests resume them, and report it as cached tokens.
        for k in ("completion", "completion_stream"):
            u = out[k]["usage"]
            self.assertEqual(u["prompt_tokens"], run_sum["prompt_tokens"], k)
            self.assertEqual(u["completion_tokens"], N, k)
            self.assertGreater(u["prompt_tokens_details"]["cached_tokens"], 0, k)
            self.assertLess(u["prompt_tokens_details"]["cached_tokens"], u["prompt_tokens"], k)
        self.assertEqual(out["stop"]["text"], want_run[:want_run.index(stop)])
        self.assertEqual(out["stop"]["finish"], "stop")
        self.assertEqual(out["refused"]["status"], 400)
        self.assertIn("'n'", out["refused"]["message"])
        self.assertEqual(out["refused"]["param"], "n")

    def test_ollama_sdk(self):
        self.start()
        want_run, run_sum = self.greedy("run", "stories", PROMPT)
        want_chat, _ = self.greedy("chat", "chatty", stdin=USER_MSG + "\n")
        out = self.node("ollama_client.mjs", {"host": self.h.base, "model": "stories",
                                              "chat_model": "chatty", "prompt": PROMPT,
                                              "user": USER_MSG, "n": N})
        self.assertTrue(out["version"])
        self.assertEqual(sorted(out["tags"]), ["chatty", "stories"])
        # stories260K has no chat template: /api/generate completes the prompt as it is.
        self.assertEqual(out["generate"]["text"], want_run)
        self.assertEqual(out["generate"]["reason"], "length")
        self.assertEqual(out["generate"]["prompt_eval_count"], run_sum["prompt_tokens"])
        self.assertEqual(out["generate"]["eval_count"], N)
        self.assertEqual(out["generate_stream"]["text"], want_run)
        self.assertTrue(out["generate_stream"]["done"])
        self.assertEqual(out["chat"]["text"], want_chat)
        self.assertEqual(out["chat"]["role"], "assistant")
        self.assertEqual(out["chat_stream"]["text"], want_chat)
        self.assertEqual(sorted(out["ps"]), ["chatty", "stories"])
        self.assertEqual(out["show"], "gguf")
        for r in out["not_here"]:
            self.assertEqual(r["status"], 501, r)
            self.assertIn("models directory", r["message"])
        # keep_alive 0 on the last chatty request: warmd unloads it once idle.
        end = time.monotonic() + WAIT
        while time.monotonic() < end:
            loaded = [m["name"] for m in self.jcurl("/api/ps")["models"]]
            if "chatty" not in loaded:
                break
            time.sleep(0.1)
        self.assertEqual(loaded, ["stories"])

    # ---- curl: the HTTP rules ----

    def test_http_rules(self):
        self.start(httpd_args=["--allowed-origins=http://app.example:3000", "--max-body=1M"])
        st, text = self.curl("/api/version", headers=[f"Host: evil.example:{self.h.port}"])
        self.assertEqual(st, 403, text)
        self.assertIn("DNS rebinding", text)
        st, text = self.curl("/v1/models", headers=[f"Host: localhost:{self.h.port + 1}"])
        self.assertEqual(st, 403, text)
        self.assertEqual(self.curl("/v1/models", headers=[f"Host: localhost:{self.h.port}"])[0], 200)
        # A foreign web page: refused, preflight included; an allowed origin is echoed.
        st, text = self.curl("/v1/models", headers=["Origin: http://evil.example"])
        self.assertEqual(st, 403, text)
        self.assertIn("allowed_origins", json.loads(text)["error"]["message"])
        p = subprocess.run(["curl", "-s", "-i", "-H", "Origin: http://app.example:3000",
                            self.h.base + "/v1/models"], capture_output=True, text=True)
        self.assertIn("Access-Control-Allow-Origin: http://app.example:3000", p.stdout)
        p = subprocess.run(["curl", "-s", "-i", self.h.base + "/v1/models"],
                           capture_output=True, text=True)
        self.assertNotIn("Access-Control-Allow-Origin", p.stdout)
        # 10 MB bodies: with a length (refused before it is read) and chunked.
        big = os.path.join(self.tmp, "big.json")
        with open(big, "wb") as f:
            f.write(b'{"prompt":"' + b"a" * (10 << 20) + b'"}')
        for extra in ([], ["Transfer-Encoding: chunked"]):
            st, text = self.curl("/v1/completions", headers=["Content-Type: application/json",
                                                             *extra], data_file=big)
            self.assertEqual(st, 413, (extra, text))
        # The server still serves after all that.
        self.assertEqual(self.curl("/api/version")[0], 200)
        # Unsupported fields that change a request's meaning: 400 naming the field.
        chat = {"model": "chatty", "messages": [{"role": "user", "content": "Hi"}]}
        cases = [({"tools": [{"type": "custom", "custom": {"name": "f"}}]}, "tools[0]"),
                 ({"functions": [{"name": "f"}]}, "functions"),
                 ({"n": 2}, "n"),
                 ({"response_format": {"type": "json_schema", "json_schema": {
                     "name": "x", "schema": {"type": "string", "pattern": "a+"}}}},
                  "response_format.json_schema.schema"),
                 ({"logprobs": True}, "logprobs"),
                 ({"messages": [{"role": "user", "content": [
                     {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
                  "messages[0].content[0].type"),
                 ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role")]
        for extra, field in cases:
            doc = self.jcurl("/v1/chat/completions", {**chat, **extra}, status=400)
            self.assertEqual(doc["error"]["param"], field, doc)
            self.assertIn(field, doc["error"]["message"])
            self.assertEqual(doc["error"]["type"], "invalid_request_error")
        doc = self.jcurl("/v1/completions", {"model": "stories", "prompt": "x", "echo": True},
                         status=400)
        self.assertEqual(doc["error"]["param"], "echo")
        doc = self.jcurl("/api/generate", {"model": "stories", "prompt": "x", "format": {
            "type": "string", "pattern": "a+"}}, status=400)
        self.assertIn("format: unsupported keyword 'pattern'", doc["error"])
        # OpenAI's error shape for warmd's own errors, Ollama's on /api.
        doc = self.jcurl("/v1/completions", {"model": "nosuch", "prompt": "x"}, status=404)
        self.assertEqual(set(doc["error"]), {"message", "type", "param", "code"})
        doc = self.jcurl("/api/generate", {"model": "nosuch", "prompt": "x"}, status=404)
        self.assertIsInstance(doc["error"], str)
        doc = self.jcurl("/api/pull", {"model": "llama3"}, status=501)
        self.assertIn("models directory", doc["error"])
        self.assertEqual(self.curl("/")[1], "Ollama is running")
        self.assertEqual(self.curl("/v2/nothing")[0], 404)

    # ---- identity ----

    def test_two_users_and_policy(self):
        self.start()
        body = {"model": "stories", "prompt": PROMPT, "max_tokens": 4, "temperature": 0}
        a1 = self.jcurl("/v1/completions", body, uid=ALICE)
        a2 = self.jcurl("/v1/completions", body, uid=ALICE)
        b1 = self.jcurl("/v1/completions", body, uid=BOB)
        self.assertEqual(a1["choices"][0]["text"], b1["choices"][0]["text"])
        self.assertEqual(a1["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        self.assertGreater(a2["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        # Bob's first request finds nothing of Alice's: his own namespace.
        self.assertEqual(b1["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        m = self.metrics()
        self.assertEqual(metric(m, f'warmd_namespace_requests_total{{namespace="uid:{ALICE}"}}'), 2)
        self.assertEqual(metric(m, f'warmd_namespace_requests_total{{namespace="uid:{BOB}"}}'), 1)
        self.assertNotIn(f'namespace="uid:{PROXY}"', m)
        st, text = self.curl("/v1/completions", body, uid=OUTSIDER)
        self.assertEqual(st, 403, text)
        self.assertIn(str(OUTSIDER), text)
        st, text = self.curl("/api/tags", uid=OUTSIDER)
        self.assertEqual(st, 403, text)
        # A proxy warmd does not trust: every request refused, naming trusted_proxy_uids.
        untrusted = self.httpd(uid=BOB)
        st, text = self.curl("/v1/models", uid=ALICE, base=untrusted.base)
        self.assertEqual(st, 403, text)
        self.assertIn("trusted_proxy_uids", text)

    def test_keep_alive_0_ends_only_the_users_own_hold(self):
        # keep_alive is a lease per user: Bob's 0 leaves the model Alice keeps loaded.
        self.start()
        gen = {"model": "stories", "prompt": PROMPT, "raw": True, "options": {"num_predict": 1},
               "stream": False}
        self.assertGreater(self.jcurl("/api/generate", dict(gen, keep_alive="10m"),
                                      uid=ALICE)["load_duration"], 0)
        self.jcurl("/api/generate", dict(gen, keep_alive=0), uid=BOB)
        # With every model idle, chatty (only Bob's ended lease holds it) goes at warmd's
        # next sweep, which would take stories too if no lease held it.
        end = time.monotonic() + WAIT
        while metric(self.metrics(), "warmd_queue_depth") and time.monotonic() < end:
            time.sleep(0.05)
        self.jcurl("/api/generate", dict(gen, model="chatty", keep_alive=0), uid=BOB)
        while time.monotonic() < end:
            loaded = [m["name"] for m in self.jcurl("/api/ps")["models"]]
            if "chatty" not in loaded:
                break
            time.sleep(0.05)
        self.assertEqual(loaded, ["stories"], "Bob's keep_alive 0 unloaded Alice's model")
        self.assertEqual(self.jcurl("/api/generate", gen, uid=ALICE)["load_duration"], 0)

    def test_token_when_unidentified(self):
        # Without the host's socket diagnostics, warm-httpd sees no client socket in its
        # namespace: the request needs a token, and the 401 names both ways.
        self.start(activated=self.activated(with_diag=False))
        self.assertIn("socket-activated", self.h.text())
        body = {"model": "stories", "prompt": PROMPT, "max_tokens": 4, "temperature": 0}
        st, text = self.curl("/v1/completions", body, uid=ALICE)
        self.assertEqual(st, 401, text)
        msg = json.loads(text)["error"]["message"]
        self.assertIn("warmctl token create", msg)
        self.assertIn("user id", msg)
        home = os.path.join(self.tmp, "alice")
        os.makedirs(home)
        os.chown(home, ALICE, ALICE)
        p = subprocess.run(as_uid(ALICE) + [WARMCTL, "--socket", self.d.socket, "token",
                                             "create"], capture_output=True, text=True,
                           env=dict(os.environ, HOME=home, XDG_CONFIG_HOME=""), timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(home, ".config", "warmd", "token")) as f:
            token = f.read().strip()
        st, text = self.curl("/v1/completions", body, uid=BOB,
                             headers=[f"Authorization: Bearer {token}"])
        self.assertEqual(st, 200, text)
        m = self.metrics()
        self.assertEqual(metric(m, f'warmd_namespace_requests_total{{namespace="uid:{ALICE}"}}'), 1)
        st, text = self.curl("/v1/completions", body, headers=["Authorization: Bearer warm_nope"])
        self.assertEqual(st, 401, text)
        self.assertIn("token", text)

    def test_identified_through_handed_in_diag_socket(self):
        # What warm-httpd.socket does: PID 1's netlink socket, made in the host's namespace,
        # identifies the host's clients although warm-httpd runs in a namespace of its own.
        self.start(activated=self.activated(with_diag=True))
        body = {"model": "stories", "prompt": PROMPT, "max_tokens": 4, "temperature": 0}
        self.jcurl("/v1/completions", body, uid=ALICE)
        self.jcurl("/v1/completions", body, uid=BOB)
        m = self.metrics()
        self.assertEqual(metric(m, f'warmd_namespace_requests_total{{namespace="uid:{ALICE}"}}'), 1)
        self.assertEqual(metric(m, f'warmd_namespace_requests_total{{namespace="uid:{BOB}"}}'), 1)

    # ---- a client hanging up ----

    def test_disconnect_cancels_generation(self):
        self.start(config="ctx_size = 16384\n")
        # Greedy "Once" runs without an end token until the context is full: that length,
        # measured here, is what a generation nobody cancels produces.
        ev = self.ctl("run", "stories", "Once", "--greedy", "-n", "16000", "--json")
        full = ev[-1]["summary"]["generated_tokens"]
        self.assertEqual(ev[-1]["summary"]["stop_reason"], "context_full")
        bodies = {"/v1/completions": {"model": "stories", "prompt": "Once", "max_tokens": 16000,
                                      "temperature": 0, "stream": True},
                  "/api/generate": {"model": "stories", "prompt": "Once", "raw": True,
                                    "options": {"num_predict": 16000, "temperature": 0}}}
        m = self.metrics()
        cancelled_before = metric(m, 'warmd_rpc_responses_total{code="CANCELLED"}')
        for path, doc in bodies.items():
            body = json.dumps(doc).encode()
            before = metric(self.metrics(), "warmd_generated_tokens_total")
            s = socket.create_connection(("127.0.0.1", self.h.port))
            s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                      % (self.h.port, len(body)) + body)
            got = b""
            while got.count(b'"done":false') + got.count(b"data: {") < 3:
                chunk = s.recv(65536)
                self.assertTrue(chunk, got)
                got += chunk
            s.close()    # mid-stream
            # The generation ends in warmd (its queue empties) long before the context
            # would have ended it.
            end = time.monotonic() + WAIT
            while time.monotonic() < end and metric(self.metrics(), "warmd_queue_depth") > 0:
                time.sleep(0.05)
            m = self.metrics()
            self.assertEqual(metric(m, "warmd_queue_depth"), 0, path)
            made = metric(m, "warmd_generated_tokens_total") - before
            self.assertGreaterEqual(made, 3, path)
            self.assertLess(made, full / 2, (path, made, full))
        self.assertGreater(metric(self.metrics(), 'warmd_rpc_responses_total{code="CANCELLED"}'),
                           cancelled_before)
        self.assertEqual(self.curl("/api/version")[0], 200)  # and it serves on

    # ---- overhead ----

    def test_rpc_overhead_per_token(self):
        if not os.path.exists(BENCH):
            self.skipTest("warm-httpd-bench not built")
        self.start()
        p = subprocess.run([BENCH, "--socket", self.d.socket, "--port", str(self.h.port),
                            "--tokens", "200", "--reps", "5"], capture_output=True, text=True,
                           timeout=600)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        print(p.stdout, file=sys.stderr)
        vals = dict(l.split()[:2] for l in p.stdout.splitlines())
        self.assertGreater(float(vals["direct_libwarm_usec_per_token"]), 0)
        self.assertGreater(float(vals["warm_httpd_sse_usec_per_token"]), 0)


if __name__ == "__main__":
    main()
