"""Gemma through the daemon, on the reference models of ../shared/models/gemma (random
weights, window 32): the greedy ids of every reference prompt equal llama.cpp's; the
prompt cache on a sliding-window model: a prompt of many windows, stored, then after a
restart the same prompt plus new tokens evaluates only the new tokens (plus at most one),
from the store, with the output of a daemon that never restarted; a second turn after a
restart (prompt + reply + new text) too. A Gemma 3 chat end to end (a warm-mkmodel gemma3
file with the gemma template): the rendering by ids, the stop on <end_of_turn>, and
`warmctl chat` continuing a conversation across a daemon restart from the store. Chunk
records of a model with large SWA rows stay within the runner's ~4 MiB."""

import json
import os
import random
import shutil
import subprocess
import time

from warmd_harness import BIN, SHARED, Daemon, DaemonTest, main, pb
from warmd_harness import collect as collect_text

MKMODEL = os.path.join(BIN, "warm-mkmodel")
WARMCTL = os.path.join(BIN, "warmctl")
# A Gemma 3 model with the gemma chat template: window 16, layers SWA/global alternating,
# <start_of_turn> <end_of_turn> as control tokens, and <end_of_turn>'s logit scaled up
# (--eot-scale) so that greedy replies end by themselves within a few tokens.
CHAT_MODEL = ["--arch", "gemma3", "--n-layer", "4", "--n-head", "2", "--n-head-kv", "1",
              "--head-dim", "64", "--window", "16", "--swa-pattern", "2",
              "--chat-template", "gemma", "--eot-scale", "10", "--seed", "5"]

GREEDY = pb.Sampling(temperature=0)
REFS = os.path.join(SHARED, "gemma") if SHARED else ""


def collect(stream):
    ids, summary = [], None
    for ev in stream:
        if ev.HasField("token"):
            if ev.token.id >= 0:
                ids.append(ev.token.id)
        elif ev.HasField("summary"):
            summary = ev.summary
    return ids, summary


def reference(name, p):
    out = {}
    with open(os.path.join(REFS, f"{name}-{p}.txt")) as f:
        for line in f:
            k, v = line.split(":", 1)
            out[k] = v.split()
    return [int(x) for x in out["prompt_ids"]], [int(x) for x in out["generated_ids"]]


class GemmaTest(DaemonTest):
    def setUp(self):
        super().setUp()
        if not REFS or not os.path.exists(os.path.join(REFS, "gemma3-tiny.gguf")):
            self.skipTest("../shared/models/gemma not found under WARM_SHARED_MODELS")
        self.n = 0

    def new_daemon(self, model, config=""):
        self.n += 1
        tmp = os.path.join(self.tmp, f"d{self.n}")
        os.makedirs(tmp)
        os.chmod(tmp, 0o755)
        d = Daemon(tmp, config="threads = 1\nparallel = 1\nctx_size = 2048\n" + config)
        self.daemons.append(d)
        shutil.copy(os.path.join(REFS, model + ".gguf"), os.path.join(d.models, "m.gguf"))
        return d

    def restart(self, d):
        self.assertEqual(d.stop(), 0, d.text())
        cfg = open(d.config).read()
        n = Daemon(d.tmp)
        with open(n.config, "w") as f:
            f.write(cfg)
        self.daemons.append(n)
        return n.start()

    def gen(self, d, tokens, max_tokens=24):
        return collect(d.stub().Generate(pb.GenerateRequest(
            model="m", tokens=tokens, sampling=GREEDY, max_tokens=max_tokens), timeout=300))

    def wait_entries(self, d, n, timeout=60):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if len(d.stub().CacheList(pb.CacheListRequest(limit=10000)).entries) >= n:
                return
            time.sleep(0.05)
        self.fail(f"fewer than {n} cache entries after {timeout} s")

    def test_references(self):
        for model in ("gemma3-tiny", "gemma4-tiny", "gemma4e-tiny"):
            d = self.new_daemon(model, "cache_max_bytes = 0\n").start()
            for p in ("P1", "P2", "P3"):
                prompt, want = reference(model, p)
                ids, s = self.gen(d, prompt)
                self.assertEqual(ids, want, f"{model} {p}")
                self.assertEqual(s.ram_tokens + s.evaluated_tokens, len(prompt))
            self.assertEqual(d.stop(), 0)

    def test_restart_resume_swa(self):
        rnd = random.Random(13)
        P = [1] + [rnd.randrange(3, 512) for _ in range(1299)]  # 40 windows of 32
        extra = [rnd.randrange(3, 512) for _ in range(20)]
        for model in ("gemma3-tiny", "gemma4e-tiny"):
            ref = self.new_daemon(model, "cache_max_bytes = 0\n").start()
            want_p, _ = self.gen(ref, P, 8)
            want, s = self.gen(ref, P + extra, 8)
            self.assertEqual(s.ram_tokens, len(P))
            self.assertEqual(ref.stop(), 0)

            d = self.new_daemon(model).start()
            ids, s = self.gen(d, P, 8)
            self.assertEqual(ids, want_p)
            self.assertEqual((s.store_tokens, s.evaluated_tokens), (0, len(P)))
            self.wait_entries(d, len(P) // 256)
            d = self.restart(d)
            ids, s = self.gen(d, P + extra, 8)
            self.assertEqual(s.ram_tokens, 0)
            self.assertGreaterEqual(s.store_tokens, len(P) - 1, s)
            self.assertLessEqual(s.evaluated_tokens, len(extra) + 1, s)
            self.assertEqual(len(s.rejected), 0, s)
            self.assertEqual(ids, want, model)

            # the next turn after another restart: prompt + reply + new text
            turn = P + extra + ids + [rnd.randrange(3, 512) for _ in range(7)]
            ref = self.new_daemon(model, "cache_max_bytes = 0\n").start()
            want2, _ = self.gen(ref, turn, 8)
            self.assertEqual(ref.stop(), 0)
            self.wait_entries(d, (len(P) + len(extra)) // 256 + 1)
            d = self.restart(d)
            ids2, s = self.gen(d, turn, 8)
            self.assertLessEqual(s.evaluated_tokens, len(turn) - len(P) - len(extra) + 1, s)
            self.assertEqual(ids2, want2, model)
            self.assertEqual(d.stop(), 0)

    def chat_daemon(self, config=""):
        if not os.path.exists(MKMODEL) or not os.path.exists(WARMCTL):
            self.skipTest("warm-mkmodel or warmctl not built")
        self.n += 1
        tmp = os.path.join(self.tmp, f"c{self.n}")
        os.makedirs(tmp)
        os.chmod(tmp, 0o755)
        d = Daemon(tmp, config="threads = 1\nparallel = 1\nctx_size = 2048\n"
                   "cache_chunk_tokens = 16\n" + config)
        self.daemons.append(d)
        subprocess.run([MKMODEL, *CHAT_MODEL, "-o", os.path.join(d.models, "chat.gguf")],
                       check=True, capture_output=True, timeout=120)
        return d.start()

    def test_chat_gemma3(self):
        d = self.chat_daemon()
        st = d.stub()

        def tok(text, special=False):
            return list(st.Tokenize(pb.TokenizeRequest(model="chat", text=text,
                                                       parse_special=special)).tokens)
        sot, eot = tok("<start_of_turn>", True), tok("<end_of_turn>", True)
        self.assertEqual((len(sot), len(eot)), (1, 1))
        bos = list(st.Tokenize(pb.TokenizeRequest(model="chat", text="x", add_special=True))
                   .tokens)[:-len(tok("x"))]
        self.assertEqual(len(bos), 1)
        # Gemma 3's template: no system turn, the system text opens the first user turn
        msgs = [pb.ChatMessage(role="system", content="You are terse."),
                pb.ChatMessage(role="user", content="  Hi there  ")]
        want = (bos + sot + tok("user\nYou are terse.\n\nHi there") + eot + tok("\n") + sot +
                tok("model\n"))
        ids, text, s = collect_text(st.Chat(pb.ChatRequest(model="chat", messages=msgs,
                                                           sampling=GREEDY, max_tokens=64)))
        self.assertEqual(s.prompt_tokens, len(want))
        gids, gtext, gs = collect_text(st.Generate(pb.GenerateRequest(
            model="chat", tokens=want, sampling=GREEDY, max_tokens=64)))
        self.assertEqual((ids, text), (gids, gtext))
        # the reply ends at <end_of_turn>: an end of generation, not the token budget
        self.assertEqual(s.stop_reason, pb.STOP_REASON_EOS, s)
        self.assertLess(s.generated_tokens, 64)
        self.assertGreater(len(ids), 0)
        self.assertNotIn(eot[0], ids)
        self.assertNotIn("<end_of_turn>", text)

        # warmctl chat keeps the conversation; between turns 2 and 3 the daemon restarts
        p = subprocess.Popen([WARMCTL, "--socket", d.socket, "chat", "chat", "--greedy",
                              "-n", "64", "--system", "You are terse.", "--json",
                              "--wait", "60s"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def turn(line):
            p.stdin.write(line + "\n")
            p.stdin.flush()
            out_ids, out_text = [], ""
            for ln in p.stdout:
                ev = json.loads(ln)
                if "token" in ev:
                    out_ids.append(ev["token"]["id"])
                    out_text += ev["token"]["text"]
                elif "summary" in ev:
                    return out_ids, out_text, ev["summary"]
                elif "error" in ev:
                    self.fail(ev)
            self.fail("warmctl chat ended: " + p.stderr.read())

        try:
            users = ["Hi there", "Tell me more about the window", "Why?"]
            t1 = turn(users[0])
            t2 = turn(users[1])
            self.assertEqual(t1[2]["stop_reason"], "eos", t1)
            # the second turn resends the conversation: its prefix comes from RAM
            self.assertGreaterEqual(t2[2]["ram_tokens"], t1[2]["prompt_tokens"] - 1, t2)
            self.wait_entries(d, 1)
            self.assertEqual(d.stop(), 0, d.text())
            d.start()
            t3 = turn(users[2])
            p.stdin.close()
            p.stdout.read()
            err = p.stderr.read()
            self.assertEqual(p.wait(timeout=60), 0, err)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()
        s3 = t3[2]
        print(f"  turn 3 after the restart: {s3['store_tokens']} of {s3['prompt_tokens']} "
              f"prompt tokens from the store, {s3['evaluated_tokens']} computed")
        self.assertEqual(s3["ram_tokens"], 0, s3)
        self.assertEqual(s3["prompt_tokens"], s3["store_tokens"] + s3["evaluated_tokens"])
        # the stored conversation (turn 2's prompt and reply, in records of 16 tokens)
        # leaves only the new turn to compute
        new = s3["prompt_tokens"] - t2[2]["prompt_tokens"] - t2[2]["generated_tokens"]
        self.assertLessEqual(s3["evaluated_tokens"], new + 16, s3)
        self.assertGreaterEqual(s3["store_tokens"], t2[2]["prompt_tokens"] - 16, s3)
        # and the reply equals that of a daemon that never saw the conversation
        ref = self.chat_daemon("cache_max_bytes = 0\n")
        conv = [pb.ChatMessage(role="system", content="You are terse."),
                pb.ChatMessage(role="user", content=users[0]),
                pb.ChatMessage(role="assistant", content=t1[1]),
                pb.ChatMessage(role="user", content=users[1]),
                pb.ChatMessage(role="assistant", content=t2[1]),
                pb.ChatMessage(role="user", content=users[2])]
        rids, rtext, rs = collect_text(ref.stub().Chat(pb.ChatRequest(
            model="chat", messages=conv, sampling=GREEDY, max_tokens=64)))
        self.assertEqual(rs.prompt_tokens, s3["prompt_tokens"])
        self.assertEqual((rids, rtext), (t3[0], t3[1]))
        self.assertEqual(ref.stop(), 0)
        self.assertEqual(d.stop(), 0)

    def test_chunk_record_size(self):
        """A model whose SWA layers hold most of its KV rows (24 layers, 20 of them SWA with
        a window of 32, K + V rows of 4 KiB per layer in f16): the runner sizes a chunk
        record by what it holds (every token's rows in the 4 global layers, the last 31 in
        the SWA layers), so each stays within ~4 MiB. (Sized by the context's KV bytes per
        cell, which an SWA ring of 800 cells in an 8192-token context makes small, records
        were 128 tokens and 4.4 MiB.)"""
        if not os.path.exists(MKMODEL):
            self.skipTest("warm-mkmodel not built")
        self.n += 1
        tmp = os.path.join(self.tmp, f"k{self.n}")
        os.makedirs(tmp)
        os.chmod(tmp, 0o755)
        d = Daemon(tmp, config="threads = 1\nparallel = 1\nctx_size = 8192\n"
                   "cache_type_k = f16\ncache_type_v = f16\n")
        self.daemons.append(d)
        subprocess.run([MKMODEL, "--arch", "gemma3", "--n-embd", "64", "--n-layer", "24",
                        "--n-head", "4", "--n-head-kv", "4", "--head-dim", "256", "--n-ff", "64",
                        "--window", "32", "--n-vocab", "300", "--seed", "3", "--ctx", "8192",
                        "-o", os.path.join(d.models, "wide.gguf")],
                       check=True, capture_output=True, timeout=120)
        d.start()
        rnd = random.Random(5)
        prompt = [1] + [rnd.randrange(3, 300) for _ in range(299)]
        collect(d.stub().Generate(pb.GenerateRequest(model="wide", tokens=prompt,
                                                     sampling=GREEDY, max_tokens=1),
                                  timeout=300))
        self.wait_entries(d, 2)
        chunks = [e for e in d.stub().CacheList(pb.CacheListRequest(limit=10000)).entries
                  if e.kind == "chunk"]
        self.assertGreater(len(chunks), 0)
        for e in chunks:
            self.assertLessEqual(e.bytes, (4 << 20) + (64 << 10), e)
        print(f"  chunk records: {chunks[0].n_tokens} tokens, {chunks[0].bytes} bytes")
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    main()
