"""`warmctl chat` on a Qwen3.5 hybrid (Gated DeltaNet layers, whose recurrent state cannot be
rolled back) end to end across a daemon restart (issue 32): a qwen35 model from warm-mkmodel
with the Qwen3.5 chat template; one warmctl chat session of three turns whose daemon is
restarted between the second and the third. The third turn resumes from the store: its
summary reports the prompt tokens taken from the store (the attention rows and the
recurrent snapshot the daemon placed before the divergence the template makes by dropping
the earlier answer's thinking), none from RAM, and only the rest computed; every reply
equals the one of a session whose daemon never restarted and keeps no store, and its third
turn took as many tokens from RAM as the restarted one took from the store."""

import json
import os
import shutil
import subprocess
import time

from warmd_harness import BIN, Daemon, DaemonTest, main, pb

MKMODEL = os.path.join(BIN, "warm-mkmodel")
WARMCTL = os.path.join(BIN, "warmctl")
TURNS = ["What is the weather on Skye in March? " * 8,
         "And on Lampedusa in August, when the ferries are full?",
         "Compare the two, briefly, for a sailor planning a trip."]
SYSTEM = "You answer questions about the weather of small islands. " * 6


class WarmctlHybridTest(DaemonTest):
    def setUp(self):
        super().setUp()
        for tool in (MKMODEL, WARMCTL):
            if not os.path.exists(tool):
                self.skipTest(f"{os.path.basename(tool)} is not built")
        self.model = os.path.join(self.tmp, "q35.gguf")
        r = subprocess.run([MKMODEL, "--arch", "qwen35", "--chat-template", "qwen35",
                            "--n-embd", "128", "--n-layer", "4", "--n-head", "4",
                            "--n-head-kv", "2", "--ctx", "4096", "--seed", "7", "-o",
                            self.model], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            self.skipTest(f"warm-mkmodel cannot write a qwen35 model: {r.stderr.strip()}")
        self.n = 0

    def new_daemon(self, config=""):
        self.n += 1
        tmp = os.path.join(self.tmp, f"d{self.n}")
        os.makedirs(tmp)
        os.chmod(tmp, 0o755)
        d = Daemon(tmp, config="threads = 1\nparallel = 1\nctx_size = 4096\n" + config)
        self.daemons.append(d)
        shutil.copy(self.model, os.path.join(d.models, "q35.gguf"))
        return d.start()

    def wait_written(self, d):
        """Write-back is asynchronous: wait until the records stop changing."""
        last, end = -1, time.monotonic() + 60
        while time.monotonic() < end:
            n = len(d.stub().CacheList(pb.CacheListRequest(limit=10000)).entries)
            if n == last and n > 0:
                return n
            last = n
            time.sleep(0.3)
        self.fail("the cache records did not settle")

    @staticmethod
    def read_turn(p):
        """The turn's event lines up to its summary: (the other events, the summary)."""
        events = []
        for line in p.stdout:
            ev = json.loads(line)
            if "error" in ev:
                raise AssertionError(f"warmctl chat: {ev}")
            if "summary" in ev:
                return events, ev["summary"]
            events.append(ev)
        raise AssertionError("warmctl chat ended before the turn's summary")

    def session(self, d, restart_before_last):
        """Plays TURNS through one warmctl chat; returns per turn (events, summary) and the
        daemon (restarted before the last turn when asked)."""
        p = subprocess.Popen([WARMCTL, "--socket", d.socket, "chat", "q35", "--greedy",
                              "-n", "12", "--json", "--wait", "60s", "--system", SYSTEM],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        out = []
        try:
            for t, text in enumerate(TURNS):
                if t + 1 == len(TURNS) and restart_before_last:
                    self.wait_written(d)
                    self.assertEqual(d.stop(), 0, d.text())
                    d.start()
                p.stdin.write(text + "\n")
                p.stdin.flush()
                out.append(self.read_turn(p))
            p.stdin.close()
            p.stdout.read()
            err = p.stderr.read()
            self.assertEqual(p.wait(timeout=60), 0, err)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        return out, d

    def test_chat_resumes_after_restart(self):
        ref_d = self.new_daemon("cache_max_bytes = 0\n")
        ref, ref_d = self.session(ref_d, restart_before_last=False)
        self.assertEqual(ref_d.stop(), 0, ref_d.text())
        d = self.new_daemon()
        got, d = self.session(d, restart_before_last=True)
        self.assertIn("recurrent layers", d.text())
        for t, ((rev, rs), (gev, gs)) in enumerate(zip(ref, got)):
            print(f"  turn {t + 1}: {gs['prompt_tokens']} prompt tokens; never restarted: "
                  f"{rs['ram_tokens']} from RAM, {rs['evaluated_tokens']} computed; "
                  f"{'restarted' if t + 1 == len(TURNS) else 'same daemon'}: "
                  f"{gs['ram_tokens']} from RAM, {gs['store_tokens']} from the store, "
                  f"{gs['evaluated_tokens']} computed")
            self.assertEqual(gev, rev, f"turn {t + 1}")
            self.assertGreater(len(gev), 0)
            self.assertEqual(gs["prompt_tokens"], rs["prompt_tokens"])
            self.assertEqual(gs["prompt_tokens"], gs["ram_tokens"] + gs["store_tokens"] +
                             gs["evaluated_tokens"], gs)
        (_, r3), (_, g3) = ref[-1], got[-1]
        (_, g1), (_, g2) = got[0], got[1]
        # after the restart: nothing in RAM, the store gives what RAM gave the daemon that
        # never restarted (up to the snapshot before the divergence), the rest is computed
        self.assertEqual(g3["ram_tokens"], 0, g3)
        self.assertGreater(g3["store_tokens"], 0, g3)
        self.assertEqual(g3["store_tokens"], r3["ram_tokens"], (g3, r3))
        self.assertEqual(g3["evaluated_tokens"], r3["evaluated_tokens"], (g3, r3))
        # the store holds the second turn too, and what is computed is the new turn and the
        # few tokens of the second prompt's end the template renders anew (its generation
        # prompt, the answer without its thinking), not the history
        self.assertGreater(g3["store_tokens"], g1["prompt_tokens"], (g3, g1))
        self.assertLess(g3["evaluated_tokens"], g3["prompt_tokens"] - g2["prompt_tokens"] + 24,
                        (g3, g2))
        self.assertEqual(d.stop(), 0, d.text())


if __name__ == "__main__":
    main()
