"""warmctl against a real warmd: every command, human output and --json parsed back,
errors with their exit codes and messages (daemon not running, permission denied, unknown
model, bad options), chat across a daemon restart, and the offline `cache check` on a
store made by warm-client-mkstore (clean, then with a damaged blob)."""

import json
import os
import pty
import select
import signal
import sys
import subprocess
import time
import unittest

from client_harness import BIN, MODEL, WARMCTL, ClientTest, main, pb

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from warmd_harness import metric  # noqa: E402

TEST_BIN = os.environ.get("WARM_TEST_BIN", os.path.join(BIN, "..", "tests"))
MKSTORE = os.path.join(TEST_BIN, "warm-client-mkstore")
MKMODEL = os.path.join(BIN, "warm-mkmodel")
COMMANDS = ["status", "models", "load", "unload", "run", "chat", "tokenize", "detokenize",
            "cache", "metrics", "bench"]
EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_UNIMPLEMENTED, EXIT_CHECK = 1, 2, 3, 4, 5


def tokens_of(events):
    return [e["token"] for e in events if "token" in e]


def summaries_of(events):
    return [e["summary"] for e in events if "summary" in e]


def cat_v(text):
    """text as `cat -v` shows its control characters (all but \\n and \\t) in UTF-8."""
    out = []
    for ch in text:
        o = ord(ch)
        if ch in "\n\t" or 0x20 <= o < 0x7F or o > 0x9F:
            out.append(ch)
        elif o == 0x7F:
            out.append("^?")
        elif o < 0x20:
            out.append("^" + chr(o + 64))
        else:  # C1: 0xC2 0x80+x, cat -v's M-B and M-^x
            out.append("M-BM-^" + chr(o - 0x80 + 64))
    return "".join(out)


def has_controls(text):
    return any(cat_v(ch) != ch for ch in text)


class WarmctlOffline(ClientTest):
    """What needs no daemon."""

    def setUp(self):
        super().setUp()
        self.d = None

    def run_ctl(self, *args, **kw):
        return self.ctl(*args, socket=False, **kw)

    def test_help_everywhere(self):
        r = self.run_ctl("--help")
        for c in COMMANDS:
            self.assertIn(c, r.out)
        for c in COMMANDS:
            r = self.run_ctl(c, "--help")
            self.assertIn(f"Usage: warmctl {c}", r.out, c)
        for sub in ["stats", "ls", "purge", "check"]:
            self.assertIn("Usage: warmctl cache", self.run_ctl("cache", sub, "--help").out)
        self.assertIn("warmctl", self.run_ctl("--version").out)
        r = self.run_ctl("frobnicate", rc=EXIT_USAGE)
        self.assertIn("unknown command 'frobnicate'", r.err)
        r = self.run_ctl("run", "m", "p", "--temperature", "hot", rc=EXIT_USAGE)
        self.assertIn("--temperature: 'hot' is not a number", r.err)
        r = self.run_ctl("run", "m", rc=EXIT_USAGE)
        self.assertIn("give MODEL and PROMPT", r.err)
        r = self.run_ctl("load", "m", "--keep-alive", "soon", rc=EXIT_USAGE)
        self.assertIn("not a duration", r.err)
        self.run_ctl("cache", rc=EXIT_USAGE)
        self.run_ctl("cache", "shred", rc=EXIT_USAGE)
        self.run_ctl("models", "--bogus", rc=EXIT_USAGE)

    def test_errors_name_the_option(self):
        """Issue 17 item 13: a bad value names its option, without the whole usage; typos
        of commands and options get a suggestion."""
        r = self.run_ctl("run", "m", "p", "-n", "abc", rc=EXIT_USAGE)
        self.assertEqual(r.err, "warmctl run: -n: 'abc' is not a number\n"
                                "Try 'warmctl run --help'.\n")
        r = self.run_ctl("run", "m", "p", "--max-tokens=abc", rc=EXIT_USAGE)
        self.assertIn("warmctl run: --max-tokens: 'abc' is not a number", r.err)
        r = self.run_ctl("run", "m", "p", "--temprature", "1", rc=EXIT_USAGE)
        self.assertIn("unknown option '--temprature'; did you mean '--temperature'?", r.err)
        self.assertNotIn("Usage:", r.err)
        r = self.run_ctl("run", "m", "p", "--top", "3", rc=EXIT_USAGE)
        self.assertIn("'--top' is ambiguous: --top-k, --top-p", r.err)
        r = self.run_ctl("run", "m", "p", "--stop", rc=EXIT_USAGE)
        self.assertIn("--stop needs a value", r.err)
        r = self.run_ctl("stauts", rc=EXIT_USAGE)
        self.assertIn("unknown command 'stauts'; did you mean 'status'?", r.err)
        self.assertNotIn("Commands:", r.err)
        r = self.run_ctl("--jsn", "status", rc=EXIT_USAGE)
        self.assertIn("unknown option '--jsn'; did you mean '--json'?", r.err)
        r = self.run_ctl("cache", "lss", rc=EXIT_USAGE)
        self.assertIn("unknown cache command 'lss'; did you mean 'ls'?", r.err)
        r = self.run_ctl("cache", "ls", "--limt", "3", rc=EXIT_USAGE)
        self.assertIn("did you mean '--limit'?", r.err)
        r = self.run_ctl("cache", "ls", "--limit", "many", rc=EXIT_USAGE)
        self.assertIn("warmctl cache ls: --limit: 'many' is not a count", r.err)
        r = self.run_ctl("load", "m", "--keep-alive", "soon", rc=EXIT_USAGE)
        self.assertIn("--keep-alive: 'soon' is not a duration", r.err)
        for args in (["run", "m", "p", "-n", "abc"], ["stauts"], ["models", "--bogus"]):
            self.assertNotIn("Usage:", self.run_ctl(*args, rc=EXIT_USAGE).err, args)

    def test_near_commands_named_with_what_they_do(self):
        """'tokens' may mean bearer tokens or tokenizing: both are offered, each with its
        summary; a plain typo keeps the one-line suggestion."""
        r = self.run_ctl("tokens", rc=EXIT_USAGE)
        self.assertIn("unknown command 'tokens'; did you mean one of these?\n", r.err)
        self.assertRegex(r.err, r"\n  token +bearer tokens for apps")
        self.assertRegex(r.err, r"\n  tokenize +text to token ids\n")
        self.assertNotIn("Commands:", r.err)
        r = self.run_ctl("stat", rc=EXIT_USAGE)
        self.assertIn("unknown command 'stat'; did you mean 'status'?\n", r.err)

    def test_load_and_unload_say_they_are_for_admins(self):
        lines = self.run_ctl("--help").out.splitlines()
        for c in ("load", "unload"):
            line = next(l for l in lines if l.split()[:1] == [c])
            self.assertIn("(admins only)", line)
            usage = " ".join(self.run_ctl(c, "--help").out.split())
            self.assertIn("Admin only: the daemon's admin_group, root or the daemon's user", usage)

    @unittest.skipUnless(os.geteuid() == 0, "needs root to run warmctl as another user")
    def test_cache_check_hint_needs_no_sudo(self):
        """Minimal Debian has no sudo: the hint for a store of another user says runuser."""
        if not os.path.exists(MKSTORE):
            self.skipTest("warm-client-mkstore not built")
        state = os.path.join(self.tmp, "private")
        os.makedirs(state)
        os.chmod(state, 0o700)  # root's: user nobody cannot open the store in it
        subprocess.run([MKSTORE, os.path.join(state, "cache"), "1"], check=True, timeout=120)
        r = self.run_ctl("cache", "check", "--state-dir", state, user=65534, rc=None)
        if r.rc == 126:
            self.skipTest("nobody cannot run the build's warmctl here")
        self.assertEqual(r.rc, EXIT_FAILED, r)
        self.assertIn("the store belongs to the daemon's user", r.err)
        self.assertIn("'runuser -u warm -- warmctl cache check'", r.err)
        self.assertNotIn("sudo", r.err)

    def test_socket_that_is_not_a_socket(self):
        r = self.run_ctl("--socket", self.tmp, "status", rc=EXIT_UNREACHABLE)
        self.assertIn(f"{self.tmp} is a directory, not warmd's socket", r.err)
        path = os.path.join(self.tmp, "warmd.conf")
        with open(path, "w") as f:
            f.write("# not a socket\n")
        r = self.run_ctl("--socket", path, "status", rc=EXIT_UNREACHABLE)
        self.assertIn(f"{path} is not a socket", r.err)
        self.assertNotIn("stale socket", r.err)

    def test_not_running(self):
        sock = os.path.join(self.tmp, "absent.sock")
        for args in (["status"], ["models"], ["run", MODEL, "hi"], ["cache", "stats"]):
            r = self.run_ctl("--socket", sock, *args, rc=EXIT_UNREACHABLE)
            self.assertIn("warmd is not running", r.err)
            self.assertIn("systemctl start warmd.socket", r.err)
        # WARM_SOCKET is honoured, and --json puts the error on stdout.
        r = self.run_ctl("--json", "status", rc=EXIT_UNREACHABLE, env={"WARM_SOCKET": sock})
        err = r.json()["error"]
        self.assertEqual(err["code"], "NOT_RUNNING")
        self.assertIn(sock, err["message"])

    def test_cache_check_offline(self):
        if not os.path.exists(MKSTORE):
            self.skipTest("warm-client-mkstore not built")
        state = os.path.join(self.tmp, "state")
        store = os.path.join(state, "cache")
        os.makedirs(state)
        subprocess.run([MKSTORE, store, "3"], check=True, timeout=120)
        r = self.run_ctl("cache", "check", "--state-dir", state, "--json")
        doc = r.json()
        self.assertTrue(doc["ok"], doc)
        self.assertEqual(doc["entries"], 8)  # 2 namespaces x (3 chunks + 1 tail)
        self.assertEqual(doc["chunks"], 6)
        self.assertEqual(doc["tails"], 2)
        self.assertEqual(doc["records_checked"], 8)
        self.assertEqual(doc["checksum_failures"], 0)
        self.assertTrue(doc["structure_ok"] and doc["bytes_ok"])
        self.assertEqual(sorted(n["namespace"] for n in doc["namespaces"]),
                         ["shared:docs", "uid:1000"])
        self.assertEqual(sum(n["entries"] for n in doc["namespaces"]), 8)
        # Human output, the store found through a config file's state_dir.
        conf = os.path.join(self.tmp, "warmd.conf")
        with open(conf, "w") as f:
            f.write(f"# test\nsocket = /nowhere\nstate_dir = {state}  # comment\n")
        r = self.run_ctl("cache", "check", "--config", conf)
        self.assertIn("ok", r.out.splitlines()[-1])
        self.assertIn("8 records", r.out)
        # Read-only: the files are unchanged by a check.
        before = os.stat(os.path.join(store, "data.mdb")).st_mtime_ns
        self.run_ctl("cache", "check", "--path", store)
        self.assertEqual(os.stat(os.path.join(store, "data.mdb")).st_mtime_ns, before)
        # Damage one blob byte in place: the check finds it and exits 5.
        path = os.path.join(store, "data.mdb")
        with open(path, "r+b") as f:
            data = f.read()
            at = data.find(b"WARMCTL-BLOB-2-1-")
            self.assertGreater(at, 0)
            f.seek(at + 4000)
            f.write(b"#")
        r = self.run_ctl("cache", "check", "--path", store, "--json", rc=EXIT_CHECK)
        doc = r.json()
        self.assertFalse(doc["ok"])
        self.assertGreaterEqual(doc["checksum_failures"], 1)
        self.assertTrue(doc["first_problem"])
        r = self.run_ctl("cache", "check", "--path", store, rc=EXIT_CHECK)
        self.assertIn("PROBLEM", r.out)
        # No store there: a message that says what to give.
        r = self.run_ctl("cache", "check", "--state-dir", os.path.join(self.tmp, "none"),
                         rc=EXIT_FAILED)
        self.assertIn("--state-dir", r.err)


class Warmctl(ClientTest):
    def test_status_models_load_unload(self):
        self.start()
        r = self.ctl("status")
        self.assertIn("is running on " + self.d.socket, r.out)
        doc = self.ctl("status", "--json").json()
        self.assertEqual(doc["api_version"], "warm.v1")
        self.assertEqual(doc["socket"], self.d.socket)
        self.assertEqual(doc["peer"]["uid"], os.getuid())
        self.assertEqual(doc["peer"]["namespace"], f"uid:{os.getuid()}")
        self.assertEqual(doc["models_available"], 1)
        self.assertEqual(doc["threads"], 1)
        # features and devices name what is in use: nothing before a model loads
        self.assertEqual(doc["devices"], [])
        self.assertNotIn("cpu", doc["features"])
        self.assertIn("devices:  none in use", r.out)
        # The same document with the option before the command.
        self.assertEqual(self.ctl("--json", "status").json()["version"], doc["version"])

        models = self.ctl("models", "--json").json()["models"]
        self.assertEqual([m["name"] for m in models], [MODEL])
        self.assertFalse(models[0]["loaded"])
        self.assertGreater(models[0]["size_bytes"], 0)
        self.assertIn(MODEL, self.ctl("models").out)

        if not doc["peer"]["admin"]:
            self.skipTest("load/unload need an admin caller")
        doc = self.ctl("load", MODEL, "--keep-alive", "10m", "--json").json()
        self.assertTrue(doc["model"]["loaded"])
        self.assertEqual(doc["model"]["architecture"], "llama")
        self.assertEqual(len(doc["model"]["fingerprint"]), 32)
        self.assertGreater(doc["load_usec"], 0)
        self.assertGreater(doc["model"]["keep_alive_left_usec"], 9 * 60 * 10**6)
        self.assertIn("already loaded", self.ctl("load", MODEL).out)
        models = self.ctl("models", "--json").json()["models"]
        self.assertTrue(models[0]["loaded"])
        doc = self.ctl("status", "--json").json()
        self.assertEqual(doc["models_loaded"], 1)
        self.assertIn("cpu", doc["features"])
        self.assertEqual([(x["name"], x["kind"]) for x in doc["devices"]], [("cpu", "cpu")])
        self.assertGreater(doc["devices"][0]["reserved_bytes"], 0)
        self.assertRegex(self.ctl("status").out, r"devices:  cpu \(cpu\), [0-9.]+ [KMG]iB reserved")
        self.assertEqual(self.ctl("unload", MODEL, "--json").json(),
                         {"model": MODEL, "was_loaded": True})
        self.assertIn("was not loaded", self.ctl("unload", MODEL).out)
        self.ctl("load", MODEL)
        self.assertEqual(self.ctl("unload", MODEL).out, f"unloaded {MODEL}\n")
        r = self.ctl("load", "no-such", rc=EXIT_FAILED)
        self.assertIn("no-such", r.err)
        err = self.ctl("load", "no-such", "--json", rc=EXIT_FAILED).json()["error"]
        self.assertEqual(err["code"], "NOT_FOUND")

    def test_run(self):
        self.start()
        r = self.ctl("run", MODEL, "Once upon a time", "-n", "12", "--greedy", "--json")
        ev = r.events()
        toks, sums = tokens_of(ev), summaries_of(ev)
        self.assertEqual(len(sums), 1)
        self.assertIn("summary", ev[-1])
        s = sums[0]
        self.assertEqual(s["generated_tokens"], 12)
        self.assertEqual(len([t for t in toks if t["id"] >= 0]), 12)
        self.assertEqual(s["stop_reason"], "max_tokens")
        self.assertEqual(s["prompt_tokens"], s["ram_tokens"] + s["store_tokens"] +
                         s["evaluated_tokens"])
        text = "".join(t["text"] for t in toks)
        # Human output: the same text, streamed, ending with a newline; the summary with -v.
        r = self.ctl("run", MODEL, "Once upon a time", "-n", "12", "--greedy", "-v")
        self.assertEqual(r.out, text + "\n")
        self.assertIn("12 generated", r.err)
        self.assertIn("stop: max_tokens", r.err)
        # The prompt from standard input.
        r = self.ctl("run", MODEL, "-", "-n", "12", "--temperature", "0",
                     stdin="Once upon a time\n")
        self.assertEqual(r.out, text + "\n")
        # The daemon's answer to the same request, through grpcio, is the same.
        ids, want = [], ""
        for e in self.d.stub().Generate(pb.GenerateRequest(
                model=MODEL, prompt="Once upon a time", max_tokens=12,
                sampling=pb.Sampling(temperature=0))):
            if e.HasField("token"):
                want += e.token.text
                ids.append(e.token.id)
        self.assertEqual(text, want)
        self.assertEqual([t["id"] for t in toks if t["id"] >= 0], [i for i in ids if i >= 0])
        # A stop string, seeded sampling, cache modes.
        stop = text.split()[2]
        s = summaries_of(self.ctl("run", MODEL, "Once upon a time", "-n", "12", "--greedy",
                                  "--stop", stop, "--json").events())[0]
        self.assertEqual(s["stop_reason"], "stop_string")
        self.assertEqual(s["stop_string"], stop)
        a = self.ctl("run", MODEL, "Tom", "-n", "10", "--seed", "42", "--temperature", "1",
                     "--top-k", "20", "--top-p", "0.9", "--min-p", "0.01", "--repeat-penalty",
                     "1.1", "--no-cache", "--json").events()
        b = self.ctl("run", MODEL, "Tom", "-n", "10", "--seed", "42", "--temperature", "1",
                     "--top-k", "20", "--top-p", "0.9", "--min-p", "0.01", "--repeat-penalty",
                     "1.1", "--cache", "refresh", "--json").events()
        self.assertEqual(tokens_of(a), tokens_of(b))
        self.assertEqual(summaries_of(a)[0]["seed"], 42)
        # Errors: unknown model, a bad sampling value, an empty prompt.
        r = self.ctl("run", "nope", "hi", rc=EXIT_FAILED)
        self.assertIn("nope", r.err)
        r = self.ctl("run", MODEL, "hi", "--temperature", "50", rc=EXIT_FAILED)
        self.assertIn("temperature", r.err)
        self.assertEqual(self.ctl("run", MODEL, "hi", "--temperature", "50", "--json",
                                  rc=EXIT_FAILED).json()["error"]["code"], "INVALID_ARGUMENT")
        self.ctl("run", MODEL, "", rc=EXIT_FAILED)
        r = self.ctl("run", MODEL, "hi", "--cache", "sometimes", rc=EXIT_USAGE)

    def test_run_interrupted(self):
        self.start()
        p = subprocess.Popen([WARMCTL, "--socket", self.d.socket, "run", MODEL, "Once", "-n",
                              "3000", "--greedy"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        # Wait for the first bytes of the reply, then Ctrl-C.
        first = p.stdout.read(1)
        self.assertTrue(first)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn("[cancelled]", err)
        # The daemon is fine and the stream is gone.
        self.assertEqual(self.ctl("status", "--json").json()["api_version"], "warm.v1")

    def test_tokenize_detokenize(self):
        self.start()
        doc = self.ctl("tokenize", MODEL, "Once upon a time", "--add-special", "--json").json()
        want = list(self.d.stub().Tokenize(pb.TokenizeRequest(
            model=MODEL, text="Once upon a time", add_special=True)).tokens)
        self.assertEqual(doc["tokens"], want)
        self.assertEqual(doc["model"], MODEL)
        r = self.ctl("tokenize", MODEL, "Once upon a time", "--add-special")
        self.assertEqual(r.out.split(), [str(t) for t in want])
        doc = self.ctl("tokenize", MODEL, "-", "--pieces", "--json", stdin="Once upon").json()
        self.assertEqual(len(doc["pieces"]), len(doc["tokens"]))
        self.assertEqual("".join(doc["pieces"]).strip(), "Once upon")
        r = self.ctl("tokenize", MODEL, "Once", "--pieces")
        self.assertIn("'", r.out)
        doc = self.ctl("detokenize", MODEL, *want, "--skip-special", "--json").json()
        self.assertEqual(doc["text"].strip(), "Once upon a time")
        self.assertEqual(self.ctl("detokenize", MODEL, *want[1:]).out.strip(), "Once upon a time")
        r = self.ctl("detokenize", MODEL, "1", "-7", rc=EXIT_FAILED)
        self.assertIn("tokens[1]", r.err)
        self.ctl("detokenize", MODEL, "x", rc=EXIT_USAGE)
        self.ctl("tokenize", "nope", "x", rc=EXIT_FAILED)

    def test_metrics(self):
        self.start()
        self.ctl("run", MODEL, "Once", "-n", "4")
        text = self.ctl("metrics").out
        self.assertIn("# TYPE warmd_uptime_seconds gauge", text)
        m = self.ctl("metrics", "--json").json()["metrics"]
        self.assertGreater(m["warmd_uptime_seconds"], 0)
        self.assertGreaterEqual(m["warmd_generated_tokens_total"], 4)
        self.assertEqual(m["warmd_models_loaded"], 1)
        # Every sample line of the text is in the JSON.
        samples = [l for l in text.splitlines() if l and not l.startswith("#")]
        self.assertGreaterEqual(len(m), len(samples) - 2)  # uptime etc. may appear between

    def test_bench(self):
        self.start()
        doc = self.ctl("bench", MODEL, "--prompt-tokens", "48", "-n", "6", "--reps", "2",
                       "--json").json()
        self.assertEqual(doc["prompt_tokens"], 48)
        self.assertEqual(len(doc["runs"]), 2)
        for run in doc["runs"]:
            s = run["summary"]
            self.assertEqual(s["prompt_tokens"], 48)
            self.assertEqual(s["generated_tokens"], 6)
            # Every run is a full prefill (at most BOS shared with an earlier run).
            self.assertGreaterEqual(s["evaluated_tokens"], 47)
            self.assertGreater(run["prefill_tokens_per_s"], 0)
            self.assertGreater(run["decode_tokens_per_s"], 0)
            self.assertGreater(run["first_token_usec"], 0)
        self.assertGreater(doc["mean"]["decode_tokens_per_s"], 0)
        r = self.ctl("bench", MODEL, "--prompt-tokens", "16", "-n", "4", "--reps", "1")
        self.assertIn("prefill t/s", r.out)
        self.assertIn("mean", r.out)
        self.ctl("bench", MODEL, "--reps", "0", rc=EXIT_USAGE)

    def test_cache_through_daemon(self):
        self.start()
        self.ctl("run", MODEL, "Once upon a time there was a dog", "-n", "4")
        r = self.ctl("cache", "stats", "--json", rc=None)
        if r.rc == EXIT_UNIMPLEMENTED:
            self.assertIn("does not support it yet", r.err)
            self.assertEqual(r.json()["error"]["code"], "UNIMPLEMENTED")
            for sub in ("ls", "purge"):
                r = self.ctl("cache", sub, rc=EXIT_UNIMPLEMENTED)
                self.assertIn("does not support it yet", r.err)
            return
        self.assertEqual(r.rc, 0, r)
        st = r.json()
        # Write-back is asynchronous: wait until the earlier requests' records have landed
        # (the write queue is empty; they were queued before their replies ended), so the
        # purge below removes what stats counted. A poll with a generous cap: two equal
        # snapshots a moment apart said nothing on a slow machine.
        end = time.monotonic() + 120
        while time.monotonic() < end:
            m = self.ctl("metrics").out
            if "warmd_cache_write_queue 0\n" in m:
                break
            time.sleep(0.05)
        self.assertIn("warmd_cache_write_queue 0\n", m)
        st = self.ctl("cache", "stats", "--json").json()
        for k in ("entries", "bytes", "budget_bytes", "hits", "misses", "rejections", "evictions"):
            self.assertIn(k, st)
        self.assertIn("entries:", self.ctl("cache", "stats").out)
        entries = self.ctl("cache", "ls", "--limit", "5", "--json").json()["entries"]
        self.assertLessEqual(len(entries), 5)
        self.assertEqual(len(entries), min(5, st["entries"]))
        for e in entries:
            self.assertEqual(e["namespace"], f"uid:{os.getuid()}")
            self.assertIn(e["kind"], ("chunk", "tail"))
        self.ctl("cache", "ls")
        purged = self.ctl("cache", "purge", "--json").json()
        self.assertEqual(purged["entries"], st["entries"])
        self.assertEqual(self.ctl("cache", "stats", "--json").json()["entries"], 0)
        self.assertIn("removed 0 entries", self.ctl("cache", "purge").out)
        r = self.ctl("cache", "ls", "--model", "nope", rc=EXIT_FAILED)
        self.assertIn("nope", r.err)
        # The live store is also readable offline, read-only, while the daemon runs.
        doc = self.ctl("cache", "check", "--state-dir", self.tmp, "--json").json()
        self.assertTrue(doc["ok"], doc)

    def test_chat(self):
        self.start()
        stdin = "Hello\nTell me more\n/exit\nnot sent\n"
        r = self.ctl("chat", MODEL, "--greedy", "-n", "8", "--system", "You tell stories.",
                     "--json", stdin=stdin, rc=None)
        modes = [["--plain"]]
        if r.rc == EXIT_UNIMPLEMENTED:
            self.assertIn("does not support it yet", r.err)
            self.assertIn("--plain", r.err)
            self.assertEqual(r.events()[-1]["error"]["code"], "UNIMPLEMENTED")
        elif r.rc == EXIT_FAILED and "has no chat template" in r.err:
            # stories260K has no chat template: Chat refuses it, --plain still works
            self.assertEqual(r.events()[-1]["error"]["code"], "FAILED_PRECONDITION")
        else:
            self.assertEqual(r.rc, 0, r)
            modes.append([])
        for mode in modes:
            r = self.ctl("chat", MODEL, *mode, "--greedy", "-n", "8", "--system",
                         "You tell stories.", "--json", stdin=stdin)
            sums = summaries_of(r.events())
            self.assertEqual(len(sums), 2, r)
            # The second turn resends the conversation: its prompt is longer and its
            # prefix comes back from RAM (or the store) instead of being recomputed.
            self.assertGreater(sums[1]["prompt_tokens"], sums[0]["prompt_tokens"] + 8)
            self.assertGreater(sums[1]["ram_tokens"] + sums[1]["store_tokens"],
                               sums[0]["prompt_tokens"] // 2)
            r = self.ctl("chat", MODEL, *mode, "--greedy", "-n", "4", stdin="Hi\n/reset\nHi\n")
            lines = [l for l in r.out.splitlines() if l]
            self.assertEqual(len(lines), 2, r)
            self.assertEqual(lines[0], lines[1])  # after /reset the same first turn again
            self.assertIn("forgotten", r.err)

    def test_output_format(self):
        """--json-schema FILE, --format json and --grammar FILE (run, and chat's /set)."""
        self.start()
        schema = {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 10},
            "age": {"type": "integer", "minimum": 1, "maximum": 99}},
            "required": ["name", "age"], "additionalProperties": False}
        path = os.path.join(self.tmp, "schema.json")
        with open(path, "w") as f:
            json.dump(schema, f)

        def run(*args, stdin=None):
            ev = self.ctl("run", MODEL, "Once upon a time", "-n", "200", "--json", *args,
                          stdin=stdin).events()
            self.assertEqual(summaries_of(ev)[0]["stop_reason"], "eos", ev)
            return "".join(t["text"] for t in tokens_of(ev))
        text = run("--json-schema", path, "--greedy")
        v = json.loads(text)
        self.assertEqual(sorted(v), ["age", "name"])
        self.assertTrue(len(v["name"]) <= 10 and 1 <= v["age"] <= 99, v)
        self.assertEqual(run("--json-schema", "-", "--greedy", stdin=json.dumps(schema)), text)
        for seed in ("1", "2"):
            v = json.loads(run("--json-schema", path, "-t", "1", "--seed", seed))
            self.assertTrue(len(v["name"]) <= 10 and 1 <= v["age"] <= 99, v)
        self.assertIsInstance(json.loads(run("--format", "json", "--greedy")), dict)
        gpath = os.path.join(self.tmp, "yes-no.gbnf")
        with open(gpath, "w") as f:
            f.write('root ::= "yes" | "no"\n')
        self.assertIn(run("--grammar", gpath, "-t", "1", "--seed", "5"), ("yes", "no"))
        # chat: /set format json constrains the next replies (--plain: stories has no template)
        r = self.ctl("chat", MODEL, "--plain", "--greedy", "-n", "200", "--json",
                     stdin="/set format json\nHi\n")
        self.assertIsInstance(json.loads("".join(t["text"] for t in tokens_of(r.events()))),
                              dict)
        # warmd's refusal names the keyword; a bad value names the option
        with open(path, "w") as f:
            json.dump({"type": "string", "pattern": "^a"}, f)
        r = self.ctl("run", MODEL, "x", "--json-schema", path, rc=EXIT_FAILED)
        self.assertIn("format.json_schema: unsupported keyword 'pattern'", r.err)
        r = self.ctl("run", MODEL, "x", "--json-schema", os.path.join(self.tmp, "absent"),
                     rc=EXIT_USAGE)
        self.assertIn("--json-schema", r.err)
        r = self.ctl("run", MODEL, "x", "--format", "yaml", rc=EXIT_USAGE)
        self.assertIn("--format: 'yaml' is not json", r.err)

    def test_chat_resumes_after_restart(self):
        d = self.start()
        mode = ["--plain"]
        if self.ctl("chat", MODEL, "-n", "1", stdin="Hi\n", rc=None).rc == 0:
            mode = []  # the daemon has Chat: test it rather than the plain transcript
        p = subprocess.Popen([WARMCTL, "--socket", d.socket, "chat", MODEL, *mode, "--greedy",
                              "-n", "6", "--json", "--wait", "60s"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            p.stdin.write("Hello there\n")
            p.stdin.flush()
            first = self.read_turn(p)
            self.assertIsNotNone(first)
            p.stdin.write("What next?\n")
            p.stdin.flush()
            second = self.read_turn(p)
            self.assertIsNotNone(second)
            # Restart between two turns: the channel reconnects by itself.
            self.assertEqual(d.stop(), 0)
            d.start()
            p.stdin.write("Why?\n")
            p.stdin.flush()
            self.assertIsNotNone(self.read_turn(p))
            # The daemon is down when the next turn is sent: warmctl waits for it to come
            # back on the same socket and state directory, then resends the conversation.
            self.assertEqual(d.stop(), 0)
            p.stdin.write("And then?\n")
            p.stdin.flush()
            time.sleep(1.0)
            d.start()
            third = self.read_turn(p)
            self.assertIsNotNone(third)
            p.stdin.close()
            p.stdout.read()
            err = p.stderr.read()
            self.assertEqual(p.wait(timeout=60), 0, err)
            self.assertIn("warmd went away", err)
            self.assertIn("reconnected", err)
            # The whole conversation went to the new daemon: nothing was lost.
            self.assertGreater(third["prompt_tokens"], second["prompt_tokens"])
            self.assertEqual(third["prompt_tokens"], third["ram_tokens"] +
                             third["store_tokens"] + third["evaluated_tokens"])
            print(f"after the restart: {third['store_tokens']} of {third['prompt_tokens']} "
                  "prompt tokens came from the prompt cache")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()

    @staticmethod
    def read_turn(p):
        """Reads event lines until a summary (returned) or an error (None)."""
        for line in p.stdout:
            ev = json.loads(line)
            if "summary" in ev:
                return ev["summary"]
            if "error" in ev:
                return None
        return None

    def tool_chat(self, lines, tools):
        """An interactive `warmctl chat tooly --json` forced to call get_time: each line is
        written once the previous turn's summary has come (a /result line that does not end
        the waiting starts no turn: the next line follows at once). Returns the summaries
        and stderr. A line "RESULT TEXT" answers every waiting call by its id."""
        p = subprocess.Popen([WARMCTL, "--socket", self.d.socket, "chat", "tooly", "--greedy",
                              "-n", "200", "--tools", tools, "--tool-choice", "get_time",
                              "--json"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        sums = []
        try:
            for line in lines:
                turn = True
                if line.startswith("RESULT "):
                    calls = sums[-1]["tool_calls"]
                    for c in calls[:-1]:
                        p.stdin.write(f"/result {c['id']} {line[7:]}\n")
                    line = f"/result {calls[-1]['id']} {line[7:]}"
                elif line.startswith("/"):
                    turn = False
                p.stdin.write(line + "\n")
                p.stdin.flush()
                if turn:
                    s = self.read_turn(p)
                    self.assertIsNotNone(s, line)
                    sums.append(s)
            p.stdin.write("/bye\n")
            p.stdin.close()
            rest = p.stdout.read()
            err = p.stderr.read()
            self.assertEqual(p.wait(timeout=60), 0, err)
            self.assertEqual(summaries_of(json.loads(l) for l in rest.splitlines()), [], rest)
            return sums, err
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()

    def test_chat_tool_results(self):
        """Issue 34: `/result [ID] TEXT` answers the model's tool calls in `warmctl chat`;
        the next turn's prompt holds the call and its result (it grows by the result's
        tokens), and a /result with no waiting call or an unknown id is refused on stderr
        and changes nothing."""
        if not os.path.exists(MKMODEL):
            self.skipTest("warm-mkmodel not built")
        self.d = self.daemon(config=self.config)
        subprocess.run([MKMODEL, "--arch", "llama", "--chat-template", "chatml", "--seed", "7",
                        "-o", os.path.join(self.d.models, "tooly.gguf")],
                       check=True, capture_output=True, timeout=120)
        self.d.start()
        tools = os.path.join(self.tmp, "tools.json")
        with open(tools, "w") as f:
            json.dump([{"type": "function", "function": {
                "name": "get_time", "description": "The time in a time zone.",
                "parameters": {"type": "object", "properties": {
                    "tz": {"type": "string", "enum": ["UTC", "CET", "PST"]}},
                    "required": ["tz"], "additionalProperties": False}}}], f)
        short, long = "12:00", "12:00 and the sun is shining over the whole of the city today"
        a, err = self.tool_chat(["/result too early", "Time in Berlin?", "/result call_nope 1",
                                 "RESULT " + short], tools)
        self.assertIn("/result: no tool call is waiting for a result", err)
        self.assertIn("/result: no tool call 'call_nope' is waiting for a result", err)
        self.assertIn(a[0]["tool_calls"][0]["id"], err)  # the error names what waits
        b, err = self.tool_chat(["Time in Berlin?", "RESULT " + long], tools)
        self.assertEqual(err, "")
        for s in a + b:
            self.assertEqual(s["stop_reason"], "tool_calls", s)
            self.assertEqual(s["tool_calls"][0]["name"], "get_time", s)
        # Greedy: the same first turn; the refused lines changed nothing.
        self.assertEqual(a[0]["prompt_tokens"], b[0]["prompt_tokens"])
        self.assertEqual([(c["name"], c["arguments"]) for c in a[0]["tool_calls"]],
                         [(c["name"], c["arguments"]) for c in b[0]["tool_calls"]])
        # The second prompt is the first, the call and its result: the results' difference
        # in tokens is the prompts' difference (one token either way at the boundaries).
        n = len(self.ctl("tokenize", "tooly", long, "--json").json()["tokens"]) - \
            len(self.ctl("tokenize", "tooly", short, "--json").json()["tokens"])
        self.assertGreater(a[1]["prompt_tokens"], a[0]["prompt_tokens"] + 8)
        self.assertLessEqual(abs(b[1]["prompt_tokens"] - a[1]["prompt_tokens"] - n), 1,
                             (a, b, n))
        print(f"prompt tokens: {a[0]['prompt_tokens']} first turn, {a[1]['prompt_tokens']} "
              f"after a {short!r} result, {b[1]['prompt_tokens']} after a {n}-token longer one;"
              f" {len(a[0]['tool_calls'])} call(s) per turn")
        # Human output: the call is shown and one result (no id: one call waits) goes on.
        r = self.ctl("chat", "tooly", "--greedy", "-n", "200", "--tools", tools,
                     "--tool-choice", "get_time", stdin="Time?\n/result 09:30\n")
        self.assertEqual(r.out.count("[tool call call_"), 2, r)
        self.assertIn(": get_time {", r.out)

    @unittest.skipUnless(os.geteuid() == 0, "needs root to run warmctl as another user")
    def test_permission_denied_names_the_group(self):
        d = self.start()
        nobody = 65534
        r = self.ctl("status", user=nobody, rc=None)
        if r.rc == 126 or "Permission denied" in r.err and "warmctl" not in r.err:
            self.skipTest("nobody cannot run the build's warmctl here")
        self.assertEqual(r.rc, EXIT_UNREACHABLE, r)
        self.assertIn("permission denied on " + d.socket, r.err)
        self.assertIn("join the group 'root'", r.err)
        self.assertIn("usermod -aG root", r.err)
        self.assertEqual(self.ctl("status", "--json", user=nobody, rc=EXIT_UNREACHABLE)
                         .json()["error"]["code"], "SOCKET_ACCESS")


class Pty:
    """A command on a pseudo-terminal: what a person at a terminal sees and types."""

    def __init__(self, argv, env):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: nothing but exec
            os.execve(argv[0], argv, env)
        self.out, self.mark = b"", 0

    def _read(self, end):
        r, _, _ = select.select([self.fd], [], [], 0.2)
        if not r:
            return time.monotonic() < end
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the other side closed
            data = b""
        self.out += data
        return bool(data)

    def expect(self, text, timeout=120):
        want, end = text.encode(), time.monotonic() + timeout
        while want not in self.out[self.mark:]:
            if not self._read(end):
                raise AssertionError(f"{text!r} not seen; output:\n{self.out!r}")
        self.mark = self.out.index(want, self.mark) + len(want)

    def send(self, text):
        os.write(self.fd, text.encode())

    def wait(self, timeout=120):
        end = time.monotonic() + timeout
        while self._read(end):
            pass
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


# About 280 tokens: a prefill of several steps (progress events), for stories260K.
LONG = " ".join(["Once upon a time there was a little dog named Tom."] * 20)


class WarmctlNewcomer(ClientTest):
    """Issue 17 items 11-15 as a person at a terminal meets them."""

    config = "threads = 1\nmax_keep_alive = 1h\nkeep_alive = 5m\n"

    def pty(self, *args, env=None):
        e = dict(os.environ, TERM="xterm", **(env or {}))
        e.pop("WARM_SOCKET", None)
        return Pty([WARMCTL, "--socket", self.d.socket, *map(str, args)], e)

    def wait_writes(self):
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if "warmd_cache_write_queue 0\n" in self.ctl("metrics").out:
                return
            time.sleep(0.05)
        self.fail("the cache writer did not drain")

    def test_run_shows_progress_on_a_terminal_only(self):
        self.start()
        p = self.pty("run", MODEL, LONG, "-n", "4", "--greedy", "--no-cache")
        p.expect("loading model stories")
        p.expect("prompt: ")
        p.expect(" tokens (")
        self.assertEqual(p.wait(), 0, p.out)
        # The line is erased before the reply: the last progress text is followed by the
        # erase sequence, and the reply's text comes after it.
        last = p.out.rindex(b"prompt: ")
        self.assertIn(b"\r\x1b[K", p.out[last:])
        # Not a terminal, or --json: no progress text anywhere.
        r = self.ctl("run", MODEL, LONG, "-n", "4", "--greedy", "--no-cache")
        self.assertNotIn("prompt: ", r.err + r.out)
        p = self.pty("run", MODEL, LONG, "-n", "4", "--greedy", "--no-cache", "--json")
        self.assertEqual(p.wait(), 0, p.out)
        self.assertNotIn(b"prompt: ", p.out)
        self.assertNotIn(b"\x1b[K", p.out)

    def start_bytes_model(self):
        """A daemon serving "bytes": random weights over a vocabulary of the 3 special
        tokens, the 256 byte tokens (id 3 + b is byte b) and one piece, so its replies are
        full of control bytes."""
        if not os.path.exists(MKMODEL):
            self.skipTest("warm-mkmodel not built")
        self.d = self.daemon(config=self.config)
        subprocess.run([MKMODEL, "--arch", "llama", "--n-embd", "64", "--n-layer", "1",
                        "--n-head", "2", "--n-ff", "128", "--n-vocab", "260", "--ctx", "512",
                        "--type", "f32", "--seed", "5", "-o",
                        os.path.join(self.d.models, "bytes.gguf")],
                       check=True, capture_output=True, timeout=120)
        self.d.start()

    def raw(self, *args):
        """warmctl's stdout through a pipe, as bytes (no newline translation)."""
        p = subprocess.run([WARMCTL, "--socket", self.d.socket, *map(str, args)],
                           capture_output=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def on_terminal(self, *args):
        """What a terminal receives from warmctl's stdout, after the progress line's erase."""
        p = self.pty(*args)
        self.assertEqual(p.wait(), 0, p.out)
        out = p.out
        return out[out.rindex(b"\x1b[K") + 3:] if b"\x1b[K" in out else out

    def test_control_bytes_escaped_on_a_terminal_only(self):
        """Generated text with ESC, CR, BS... must not drive the terminal: on a tty they
        are shown as `cat -v` shows them; piped or with --json the text is as generated."""
        self.start_bytes_model()
        args = ("run", "bytes", "Once", "-n", "64", "--greedy", "--no-cache")
        events = [json.loads(l) for l in self.raw(*args, "--json").splitlines()]
        text = "".join(t["text"] for t in tokens_of(events))
        self.assertTrue(has_controls(text), repr(text))  # the premise
        end = "" if text.endswith("\n") else "\n"
        self.assertEqual(self.raw(*args), (text + end).encode())
        # The terminal's line discipline turns \n into \r\n (onlcr); nothing else is raw.
        shown = self.on_terminal(*args)
        self.assertEqual(shown, (cat_v(text) + end).replace("\n", "\r\n").encode())
        self.assertFalse(has_controls(shown.decode().replace("\r\n", "\n")), shown)
        # --json on a terminal: JSON's own escapes, the same text.
        p = self.pty(*args, "--json")
        self.assertEqual(p.wait(), 0, p.out)
        events = [json.loads(l) for l in p.out.decode().splitlines() if l.startswith("{")]
        self.assertEqual("".join(t["text"] for t in tokens_of(events)), text)
        # detokenize: each kind of control character, exactly.
        ids = [3 + b for b in b"\x1b[2J\r\x07\x08\x7f\t\na\xc2\x9b\xc3\xa9"]
        self.assertEqual(self.on_terminal("detokenize", "bytes", *ids),
                         "^[[2J^M^G^H^?\t\r\naM-BM-^[\u00e9\r\n".encode())
        self.assertEqual(self.raw("detokenize", "bytes", *ids),
                         "\x1b[2J\r\x07\x08\x7f\t\na\u009b\u00e9\n".encode())
        # tokenize --pieces shows the pieces the same way.
        shown = self.on_terminal("tokenize", "bytes", "\x1b[2J", "--pieces")
        self.assertIn(b"'^['\r\n", shown)
        self.assertNotIn(b"\x1b", shown)

    def test_verbose_summary_load_time_and_seed(self):
        self.start()
        r = self.ctl("run", MODEL, "Once", "-n", "3", "--greedy", "-v")
        self.assertIn("model loaded in ", r.err)
        self.assertNotIn("seed", r.err)  # greedy: no seed to repeat
        r = self.ctl("run", MODEL, "Once", "-n", "3", "--temperature", "1", "--seed", "7", "-v")
        self.assertNotIn("model loaded in ", r.err)  # resident now
        self.assertIn("seed 7]", r.err)
        # Seeds above 2^53 survive a JSON reader: written as strings; small ones as numbers.
        s = summaries_of(self.ctl("run", MODEL, "Once", "-n", "1", "--temperature", "1",
                                  "--seed", str(2**64 - 1), "--json").events())[0]
        self.assertEqual(s["seed"], str(2**64 - 1))
        s = summaries_of(self.ctl("run", MODEL, "Once", "-n", "1", "--temperature", "1",
                                  "--seed", str(2**53), "--json").events())[0]
        self.assertEqual(s["seed"], 2**53)

    def test_keep_alive_like_ollama(self):
        self.start()
        loaded = lambda: self.ctl("models", "--json").json()["models"][0]["loaded"]
        r = self.ctl("run", MODEL, "Once", "-n", "1", "--keep-alive", "2h")
        self.assertIn("warmctl run: warmd: keep_alive 2h is more than the server's "
                      "max_keep_alive (1h)", r.err)
        s = summaries_of(self.ctl("run", MODEL, "Once", "-n", "1", "--keep-alive", "forever",
                                  "--json").events())[0]
        self.assertEqual(s["keep_alive_usec"], 3600 * 10**6)
        self.assertEqual(s["warnings"], [])
        s = summaries_of(self.ctl("run", MODEL, "Once", "-n", "1", "--keep-alive", "-1",
                                  "--json").events())[0]
        self.assertEqual(s["keep_alive_usec"], 3600 * 10**6)
        self.assertTrue(loaded())
        r = self.ctl("load", MODEL, "--keep-alive", "2h")
        self.assertIn("keep-alive 2h00m is more than warmd allows (max_keep_alive 60m00s): "
                      "capped", r.err)
        # 0: unloaded once the request is over.
        self.ctl("run", MODEL, "Once", "-n", "1", "--keep-alive", "0")
        end = time.monotonic() + 120
        while loaded() and time.monotonic() < end:
            time.sleep(0.05)
        self.assertFalse(loaded())

    def test_status_counts_other_streams_only(self):
        self.start()
        r = self.ctl("status")
        self.assertIn("streams:  0 active", r.out)
        cache = next(l for l in r.out.splitlines() if l.startswith("cache:"))
        self.assertNotIn("keep-alive", cache)
        self.assertIn("keep-alive: at most 60m00s", r.out)
        if self.ctl("status", "--json").json()["peer"]["admin"]:
            self.assertEqual(self.ctl("status", "--json").json()["active_streams"], 0)

    def test_cache_ls_newest_first_with_model(self):
        self.start()
        for prompt in ("Once upon a time there was a cat", LONG, "Tom and Lily went out"):
            self.ctl("run", MODEL, prompt, "-n", "1")
            self.wait_writes()
            time.sleep(0.002)  # distinct last-use stamps between the prompts
        fp = self.ctl("models", "--json").json()["models"][0]["fingerprint"]
        entries = self.ctl("cache", "ls", "--json").json()["entries"]
        self.assertGreaterEqual(len(entries), 4)
        used = [e["last_used_usec"] for e in entries]
        self.assertEqual(used, sorted(used, reverse=True))
        self.assertEqual({e["model"] for e in entries}, {MODEL})
        self.assertEqual({e["fingerprint"] for e in entries}, {fp})
        lines = self.ctl("cache", "ls").out.splitlines()
        self.assertEqual(lines[0].split()[:4], ["LAST", "USED", "MODEL", "KIND"])
        self.assertTrue(all(l.split()[2] == MODEL for l in lines[1:]), lines)

    def test_chat_without_template_says_what_to_do(self):
        self.start()
        r = self.ctl("chat", MODEL, "-n", "2", stdin="Hi\n", rc=EXIT_FAILED)
        self.assertIn(f"use `warmctl chat --plain {MODEL}`", r.err)
        self.assertIn(f"`warmctl run {MODEL} PROMPT`", r.err)
        for rpc in ("Generate", "Chat(", "FAILED_PRECONDITION"):
            self.assertNotIn(rpc, r.err)

    def test_chat_on_a_terminal(self):
        self.start()
        state = os.path.join(self.tmp, "state")
        p = self.pty("chat", MODEL, "--plain", "--greedy", "-n", "4", "-v",
                     env={"XDG_STATE_HOME": state})
        try:
            p.expect(f"Chatting with {MODEL}")
            p.expect("/bye or Ctrl-D to leave")
            p.expect(">>> ")
            p.send("/help\r")
            p.expect("/clear")
            p.expect(">>> ")
            p.send("/set temperature 0.5\r")
            p.expect("[temperature set]")
            p.send("/set\r")
            p.expect("temperature 0.5")
            p.send("/set tempreture 1\r")
            p.expect("did you mean 'temperature'?")
            p.send("/greedy\r")
            p.expect("unknown command '/greedy'")
            p.expect(">>> ")
            # A message of several lines between triple quotes is one turn.
            p.send('"""\r')
            p.expect("... ")
            p.send("Once upon a time\r")
            p.expect("... ")
            p.send('there was a dog"""\r')
            p.expect("generated in")
            p.expect(">>> ")
            # Line editing: a typo taken back with backspace.
            p.send("Tomm\x7f went home\r")
            p.expect("generated in")
            p.expect(">>> ")
            p.send("/clear\r")
            p.expect("[conversation forgotten]")
            p.send("/bye\r")
            self.assertEqual(p.wait(), 0, p.out)
        finally:
            if p.pid:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                    os.waitpid(p.pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass
        self.assertEqual(p.out.count(b"generated in"), 2, p.out)
        with open(os.path.join(state, "warmctl", "chat_history"), encoding="utf-8") as f:
            hist = f.read().replace("\\040", " ")  # libedit's file escapes spaces
        self.assertIn("Tom went home", hist)
        self.assertIn("/help", hist)
        self.assertNotIn("Tomm", hist)


class WarmctlPolicy(ClientTest):
    config = "threads = 1\nallowed_uids = root\n"

    @unittest.skipUnless(os.geteuid() == 0, "needs root to run warmctl as another user")
    def test_refused_by_policy(self):
        d = self.start()
        os.chmod(d.socket, 0o666)
        refused = lambda: metric(self.ctl("metrics").out, "warmd_connections_refused_total")
        before, log_before = refused(), self.d.text().count("refused connection: uid 65534")
        r = self.ctl("status", user=65534, rc=None)
        if r.rc == 126:
            self.skipTest("nobody cannot run the build's warmctl here")
        # A plain sentence, exit 3 like every "cannot reach warmd", and one refusal (one
        # log line) for one refused command: not one per connection warmctl tried.
        self.assertEqual(r.rc, EXIT_UNREACHABLE, r)
        self.assertIn(f"warmd at {d.socket} does not serve uid 65534", r.err)
        self.assertIn("allowed_uids", r.err)
        self.assertNotIn("UNAVAILABLE", r.err)
        self.assertEqual(refused() - before, 1)
        self.assertEqual(self.d.text().count("refused connection: uid 65534") - log_before, 1)
        self.assertEqual(self.ctl("status", "--json", user=65534, rc=EXIT_UNREACHABLE)
                         .json()["error"]["code"], "SOCKET_ACCESS")


if __name__ == "__main__":
    main()
