"""A Qwen3.5 hybrid (Gated DeltaNet + attention: its recurrent state cannot be rolled back)
resumes a conversation after a restart by computing only what follows its last recurrent
snapshot before the divergence (DESIGN.md 3.6, issue 32; the #26004 gap of llama.cpp).

Chat: a qwen35 model from warm-mkmodel with the Qwen3.5 template (--chat-template qwen35:
<|im_start|>, a generation prompt that opens <think>, earlier answers rendered without
their thinking); each turn resumes at the previous prompt's last <|im_start|>, in RAM and
after a restart alike, with the same greedy ids.

Generate:

The model is ../shared/models/hybrid/qwen35-tiny.gguf (random weights, stories260K's
vocabulary, no chat template), so the conversation is built from token ids the way a
thinking model's template renders one: each turn's prompt ends with a 4-token generation
prompt whose last token opens the thinking; the next turn renders the previous answer after
the first 3 of those tokens without its thinking (the first half of the answer here), so
the new prompt diverges 3 tokens past the previous prompt's end minus its generation
prompt, where the daemon keeps a snapshot (runner.c: 4 tokens before the end when the model
has no chat template). Per turn: the prompt tokens taken from RAM, from the store and
computed (the Generate summary), against a daemon that never restarts; greedy ids equal."""

import os
import random
import shutil
import time

import subprocess

from warmd_harness import BIN, SHARED, Daemon, DaemonTest, main, pb
from warmd_harness import collect as collect_text

GREEDY = pb.Sampling(temperature=0)
MKMODEL = os.path.join(BIN, "warm-mkmodel")
SYSTEM = ("You answer questions about the weather of small islands, in two sentences, "
          "naming the island, the season and the wind. ") * 6
USERS = ["What is the weather on Skye in March?", "And on Lampedusa in August, when the "
         "ferries are full?", "Compare the two, briefly, for a sailor planning a trip."]
MODEL = os.path.join(SHARED, "hybrid", "qwen35-tiny.gguf") if SHARED else ""
N_VOCAB = 512
GEN_PROMPT = [11, 12, 13, 14]  # "<|im_start|>", "assistant", "\n", "<think>"
END = 15                       # "<|im_end|>"
ANSWER = 24


def collect(stream):
    ids, summary = [], None
    for ev in stream:
        if ev.HasField("token"):
            if ev.token.id >= 0:
                ids.append(ev.token.id)
        elif ev.HasField("summary"):
            summary = ev.summary
    return ids, summary


def tokens(n, seed):
    rnd = random.Random(seed)
    return [rnd.randrange(20, N_VOCAB) for _ in range(n)]


class HybridResumeTest(DaemonTest):
    def setUp(self):
        super().setUp()
        if not MODEL or not os.path.exists(MODEL):
            self.skipTest("../shared/models/hybrid/qwen35-tiny.gguf is absent")
        self.n = 0

    def new_daemon(self, config="", model=None):
        self.n += 1
        tmp = os.path.join(self.tmp, f"d{self.n}")
        os.makedirs(tmp)
        os.chmod(tmp, 0o755)
        d = Daemon(tmp, config="threads = 1\nparallel = 1\nctx_size = 4096\n" + config)
        self.daemons.append(d)
        shutil.copy(model or MODEL, os.path.join(d.models, "m.gguf"))
        return d

    def restart(self, d):
        self.assertEqual(d.stop(), 0, d.text())
        with open(d.config) as f:
            cfg = f.read()
        n = Daemon(d.tmp)
        with open(n.config, "w") as f:
            f.write(cfg)
        self.daemons.append(n)
        return n.start()

    def gen(self, d, prompt):
        return collect(d.stub().Generate(pb.GenerateRequest(
            model="m", tokens=prompt, sampling=GREEDY, max_tokens=ANSWER), timeout=300))

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

    def conversation(self, d, restart_each_turn, turns=4):
        """Plays the turns; returns per turn (ids, summary, the snapshot position before the
        divergence) and the daemon (restarted before every turn after the first when asked)."""
        history = tokens(300, 1)                    # the system prompt
        out = []
        for t in range(turns):
            history = history + tokens(150 + 90 * t, 10 + t)   # the user's message
            prompt = history + GEN_PROMPT
            if t and restart_each_turn:
                self.wait_written(d)
                d = self.restart(d)
            ids, s = self.gen(d, prompt)
            self.assertEqual(s.prompt_tokens, len(prompt), s)
            out.append((ids, s, len(history)))
            # the template keeps the answer without its thinking (the first half)
            history = history + GEN_PROMPT[:3] + ids[len(ids) // 2:] + [END]
        return out, d

    def test_turns_resume_after_restart(self):
        ref_d = self.new_daemon("cache_max_bytes = 0\n").start()
        ref, ref_d = self.conversation(ref_d, restart_each_turn=False)
        self.assertEqual(ref_d.stop(), 0, ref_d.text())
        d = self.new_daemon().start()
        got, d = self.conversation(d, restart_each_turn=True)
        for t, ((rid, rs, _), (gid, gs, _)) in enumerate(zip(ref, got)):
            snap = ref[t - 1][2] if t else 0  # the previous prompt's end minus GEN_PROMPT
            print(f"  turn {t + 1}: {gs.prompt_tokens} prompt tokens; never restarted: "
                  f"{rs.ram_tokens} from RAM, {rs.evaluated_tokens} computed; restarted: "
                  f"{gs.store_tokens} from the store, {gs.evaluated_tokens} computed "
                  f"(restore {gs.restore_usec} us)")
            self.assertEqual(gid, rid, f"turn {t + 1}")
            self.assertEqual(len(gid), ANSWER)
            # at most the tokens after the snapshot at the previous prompt's end minus its
            # generation prompt (which is before the divergence, 3 tokens later)
            self.assertEqual(rs.evaluated_tokens, rs.prompt_tokens - snap, rs)
            self.assertEqual(rs.ram_tokens, snap, rs)
            self.assertEqual(gs.ram_tokens, 0, gs)
            self.assertEqual(gs.store_tokens, snap, gs)
            self.assertEqual(gs.evaluated_tokens, gs.prompt_tokens - snap, gs)
            self.assertEqual(len(gs.rejected), 0, gs)
        # the last prompt again after a restart: only its generation prompt is computed
        self.wait_written(d)
        d = self.restart(d)
        ids, s = self.gen(d, self.last_prompt(got))
        self.assertEqual(ids, got[-1][0])
        self.assertEqual((s.store_tokens, s.evaluated_tokens), (got[-1][2], len(GEN_PROMPT)), s)
        self.assertEqual(d.stop(), 0, d.text())

    @staticmethod
    def last_prompt(turns):
        """The last turn's prompt, rebuilt as conversation() built it."""
        history = tokens(300, 1)
        for t, (ids, _, _) in enumerate(turns):
            history = history + tokens(150 + 90 * t, 10 + t)
            if t + 1 == len(turns):
                return history + GEN_PROMPT
            history = history + GEN_PROMPT[:3] + ids[len(ids) // 2:] + [END]

    def chat(self, d, restart_each_turn):
        msgs = [pb.ChatMessage(role="system", content=SYSTEM)]
        out = []
        for t, user in enumerate(USERS):
            msgs.append(pb.ChatMessage(role="user", content=user))
            if t and restart_each_turn:
                self.wait_written(d)
                d = self.restart(d)
            ids, _, s = collect_text(d.stub().Chat(pb.ChatRequest(
                model="m", messages=msgs, sampling=GREEDY, max_tokens=ANSWER,
                think=pb.THINK_ON), timeout=300))
            out.append((ids, s))
            # the client sends the answer back; the template drops its thinking
            msgs.append(pb.ChatMessage(role="assistant", content=f"Answer {t}: fair and windy."))
        return out, d

    def test_chat_turns_qwen35_template(self):
        if not os.path.exists(MKMODEL):
            self.skipTest("warm-mkmodel not built")
        path = os.path.join(self.tmp, "q35.gguf")
        r = subprocess.run([MKMODEL, "--arch", "qwen35", "--chat-template", "qwen35",
                            "--n-embd", "128", "--n-layer", "4", "--n-head", "4",
                            "--n-head-kv", "2", "--ctx", "4096", "--seed", "7", "-o", path],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            self.skipTest(f"warm-mkmodel cannot write a qwen35 model: {r.stderr.strip()}")
        ref_d = self.new_daemon("cache_max_bytes = 0\n", model=path).start()
        ref, ref_d = self.chat(ref_d, restart_each_turn=False)
        self.assertEqual(ref_d.stop(), 0, ref_d.text())
        d = self.new_daemon(model=path).start()
        got, d = self.chat(d, restart_each_turn=True)
        self.assertIn("recurrent layers", d.text())
        for t, ((rid, rs), (gid, gs)) in enumerate(zip(ref, got)):
            print(f"  chat turn {t + 1}: {gs.prompt_tokens} prompt tokens; never restarted: "
                  f"{rs.ram_tokens} from RAM, {rs.evaluated_tokens} computed; restarted: "
                  f"{gs.store_tokens} from the store, {gs.evaluated_tokens} computed")
            self.assertEqual(gid, rid, f"turn {t + 1}")
            self.assertEqual(gs.ram_tokens, 0, gs)
            self.assertEqual(len(gs.rejected), 0, gs)
            if t == 0:
                self.assertEqual((rs.evaluated_tokens, gs.evaluated_tokens),
                                 (rs.prompt_tokens, gs.prompt_tokens))
                continue
            # the previous prompt's last <|im_start|>: before its generation prompt
            # "<|im_start|>assistant\n<think>\n", where this prompt diverges
            prev = ref[t - 1][1].prompt_tokens
            self.assertEqual(gs.store_tokens, rs.ram_tokens)
            self.assertGreaterEqual(rs.ram_tokens, prev - 16, rs)
            self.assertLess(rs.ram_tokens, prev - 2, rs)
            self.assertEqual(gs.evaluated_tokens, gs.prompt_tokens - gs.store_tokens)
        self.assertEqual(d.stop(), 0, d.text())

    def test_reference_p3_resume(self):
        """llama.cpp's greedy ids for the 800-token P3 (README of the hybrid models; f32 K/V
        as its runs), computed whole, then again after a restart from the store: the 796
        tokens before the last 4 come back with their recurrent snapshot, 4 are computed."""
        ref = os.path.join(SHARED, "hybrid", "qwen35-tiny-P3.txt")
        if not os.path.exists(ref):
            self.skipTest("the qwen35-tiny P3 reference is absent")
        with open(ref) as f:
            lines = dict(line.split(": ", 1) for line in f.read().splitlines() if ": " in line)
        prompt = [int(x) for x in lines["prompt_ids"].split()]
        want = [int(x) for x in lines["generated_ids"].split()]
        d = self.new_daemon("cache_type_k = f32\ncache_type_v = f32\n").start()
        ids, s = self.gen(d, prompt)
        self.assertEqual(ids, want[:ANSWER])
        self.assertEqual(s.evaluated_tokens, len(prompt))
        self.wait_written(d)
        d = self.restart(d)
        ids, s = self.gen(d, prompt)
        print(f"  P3 after a restart: {s.store_tokens} from the store, {s.evaluated_tokens} "
              f"computed, restore {s.restore_usec} us")
        self.assertEqual(ids, want[:ANSWER])
        self.assertEqual((s.store_tokens, s.evaluated_tokens), (len(prompt) - 4, 4), s)
        self.assertEqual(d.stop(), 0, d.text())

    def test_store_records(self):
        """What a hybrid stores for a prompt of 1,004 tokens: chunk records of attention rows
        only, except the chunk ending at the sparse snapshot (512: four times the state's
        size in tokens of KV, rounded up to chunks), and a tail ending at the prompt's end
        minus its generation prompt (1,000) with the snapshot; each snapshot costs its
        record the state's bytes, which the budget counts."""
        d = self.new_daemon().start()
        prompt = tokens(1000, 5) + GEN_PROMPT
        ids, s = self.gen(d, prompt)
        self.assertEqual(s.evaluated_tokens, len(prompt))
        self.wait_written(d)
        entries = list(d.stub().CacheList(pb.CacheListRequest(limit=10000)).entries)
        got = sorted((e.kind, e.position, e.n_tokens) for e in entries)
        self.assertEqual(got, [("chunk", 0, 256), ("chunk", 256, 256), ("chunk", 512, 256),
                               ("chunk", 768, 256), ("tail", 768, 232)], got)
        size = {(e.kind, e.position): e.bytes for e in entries}
        rows = size[("chunk", 0)]
        print(f"  chunk of 256 tokens: {rows} B, with the snapshot {size[('chunk', 256)]} B; "
              f"tail of 232 tokens with the snapshot {size[('tail', 768)]} B")
        self.assertEqual(size[("chunk", 512)], rows)
        self.assertEqual(size[("chunk", 768)], rows)
        state = 125952  # 6 layers x (conv 3 x 384 + S 4 x 32 x 32) f32
        self.assertAlmostEqual(size[("chunk", 256)] - rows, state, delta=8192)
        stats = d.stub().CacheStats(pb.CacheStatsRequest())
        self.assertEqual(stats.bytes, sum(size.values()))
        self.assertEqual(d.stop(), 0, d.text())


if __name__ == "__main__":
    main()
