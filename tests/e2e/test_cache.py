"""The persistent prompt cache end to end, on small generated models (warm-mkmodel):
restart resume (the prompt comes back from the store, only the new tokens are computed,
greedy output equals a daemon that never restarted), the KV rotation toggle and another
blob format version (entries rejected with their reason, output correct, entries
rewritten, then hit), kill -9 while write-back is in flight (the store opens, what was
written before is intact), per-request cache options (skip, refresh), CacheStats /
CacheList / CachePurge and the cache metrics."""

import os
import random
import signal
import subprocess
import time

from warmd_harness import BIN, Daemon, DaemonTest, grpc, main, metric, pb

C = grpc.StatusCode
GREEDY = pb.Sampling(temperature=0)
MKMODEL = os.path.join(BIN, "warm-mkmodel")
PATCH = os.path.join(BIN, "warm-cache-patch")
N_VOCAB = 320


def collect(stream):
    ids, summary = [], None
    for ev in stream:
        if ev.HasField("token"):
            if ev.token.id >= 0:
                ids.append(ev.token.id)
        elif ev.HasField("summary"):
            summary = ev.summary
    return ids, summary


def prompt(n, seed):
    rnd = random.Random(seed)
    return [rnd.randrange(3, N_VOCAB) for _ in range(n)]


class CacheTest(DaemonTest):
    def setUp(self):
        super().setUp()
        if not os.path.exists(MKMODEL):
            self.skipTest("warm-mkmodel not built")
        self.n_daemons = 0

    def model(self, path, head_dim=64):
        # head_dim 128 for the rotation cases (q8_0 K/V are rotated with n_rot 128)
        subprocess.run([MKMODEL, "--arch", "llama", "--n-embd", "128", "--n-layer", "2",
                        "--n-head", "2", "--n-head-kv", "1", "--head-dim", str(head_dim),
                        "--n-ff", "256", "--n-vocab", str(N_VOCAB), "--ctx", "4096",
                        "--type", "f16", "--seed", "7", "-o", path],
                       check=True, capture_output=True, timeout=120)

    def new_daemon(self, config="", env=None, head_dim=64, tmp=None):
        """A daemon in its own state directory (tmp: reuse one, i.e. restart on it)."""
        if tmp is None:
            self.n_daemons += 1
            tmp = os.path.join(self.tmp, f"d{self.n_daemons}")
            os.makedirs(tmp)
            os.chmod(tmp, 0o755)
        d = Daemon(tmp, config="threads = 1\nparallel = 1\nctx_size = 2560\n" + config, env=env)
        self.daemons.append(d)
        path = os.path.join(d.models, "m.gguf")
        if not os.path.exists(path):
            self.model(path, head_dim)
        return d

    def restart(self, d, env=None, config=None):
        """Stops d with SIGTERM (exit 0) and starts a new daemon on the same state."""
        self.assertEqual(d.stop(), 0, d.text())
        cfg = open(d.config).read() if config is None else config
        n = Daemon(d.tmp, env=env)
        with open(n.config, "w") as f:
            f.write(cfg)
        self.daemons.append(n)
        return n.start()

    def gen(self, d, tokens, max_tokens=8, mode=None, ns=""):
        cache = pb.CacheOptions(mode=mode, namespace=ns) if mode is not None or ns else None
        return collect(d.stub().Generate(pb.GenerateRequest(
            model="m", tokens=tokens, sampling=GREEDY, max_tokens=max_tokens, cache=cache),
            timeout=300))

    def entries(self, d):
        return list(d.stub().CacheList(pb.CacheListRequest(limit=10000)).entries)

    def wait_entries(self, d, n, timeout=60):
        """Write-back is asynchronous: wait until the namespace has at least n records."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            e = self.entries(d)
            if len(e) >= n:
                return e
            time.sleep(0.05)
        self.fail(f"only {len(self.entries(d))} cache entries after {timeout} s; want {n}")

    # ---- restart resume -----------------------------------------------------------------

    def test_restart_resume(self):
        P = prompt(2100, 1)
        extra = prompt(20, 2)
        # the reference: a daemon that never restarts (RAM reuse only)
        ref = self.new_daemon("cache_max_bytes = 0\n").start()
        want_p, s = self.gen(ref, P)
        self.assertEqual(s.evaluated_tokens, len(P))
        want, s = self.gen(ref, P + extra)
        self.assertEqual(s.ram_tokens, len(P))
        self.assertEqual(ref.stop(), 0)

        d = self.new_daemon().start()
        ids, s = self.gen(d, P)
        self.assertEqual(ids, want_p)
        self.assertEqual((s.store_tokens, s.evaluated_tokens), (0, len(P)))
        d = self.restart(d)
        ids, s = self.gen(d, P + extra)
        self.assertEqual(s.prompt_tokens, len(P) + len(extra))
        self.assertEqual(s.ram_tokens, 0)
        self.assertGreaterEqual(s.store_tokens, len(P) - 1, s)
        self.assertLessEqual(s.evaluated_tokens, len(extra) + 1, s)
        self.assertEqual(s.ram_tokens + s.store_tokens + s.evaluated_tokens, s.prompt_tokens)
        self.assertEqual(len(s.rejected), 0)
        self.assertGreater(s.restore_usec, 0)
        self.assertEqual(ids, want)
        m = d.stub().Metrics(pb.MetricsRequest()).text
        self.assertGreaterEqual(metric(m, "warmd_prompt_tokens_store_total"), len(P) - 1)
        self.assertEqual(d.stop(), 0)

    def test_conversation_resume(self):
        """The next turn (prompt + the reply + new text) after a restart restores the whole
        previous sequence: the reply's KV comes back too."""
        P = prompt(700, 9)
        new = prompt(15, 10)
        ref = self.new_daemon("cache_max_bytes = 0\n").start()
        reply, _ = self.gen(ref, P, max_tokens=40)
        want, s = self.gen(ref, P + reply + new)
        self.assertEqual(s.ram_tokens, len(P) + len(reply) - 1)
        self.assertEqual(ref.stop(), 0)
        d = self.new_daemon().start()
        ids, _ = self.gen(d, P, max_tokens=40)
        self.assertEqual(ids, reply)
        d = self.restart(d)
        ids, s = self.gen(d, P + reply + new)
        self.assertEqual(s.store_tokens, len(P) + len(reply) - 1, s)
        self.assertEqual(s.evaluated_tokens, len(new) + 1)
        self.assertEqual(ids, want)
        self.assertEqual(d.stop(), 0)

    def test_resend_whole_chunks(self):
        """A prompt of exactly two chunks, sent again after a restart: everything but the
        last token comes from the store (a tail of C - 1 tokens under the first chunk)."""
        P = prompt(512, 13)
        d = self.new_daemon().start()
        want, _ = self.gen(d, P)
        d = self.restart(d)
        ids, s = self.gen(d, P)
        self.assertEqual((s.store_tokens, s.evaluated_tokens), (511, 1), s)
        self.assertEqual(ids, want)
        self.assertEqual(d.stop(), 0)

    # ---- rejection: rotation and version -------------------------------------------------

    def test_rotation_toggle(self):
        P = prompt(700, 3)
        q8 = "cache_type_k = q8_0\ncache_type_v = q8_0\n"
        off = {"WARM_ATTN_ROT_DISABLE": "1"}
        # references without a cache, rotation on and off
        ref_on = self.new_daemon(q8 + "cache_max_bytes = 0\n", head_dim=128).start()
        want_on, _ = self.gen(ref_on, P)
        self.assertEqual(ref_on.stop(), 0)
        ref_off = self.new_daemon(q8 + "cache_max_bytes = 0\n", env=off, head_dim=128).start()
        want_off, _ = self.gen(ref_off, P)
        self.assertEqual(ref_off.stop(), 0)

        d = self.new_daemon(q8, head_dim=128).start()
        ids, s = self.gen(d, P)
        self.assertEqual(ids, want_on)
        for env, want, blob_rot, run_rot in ((off, want_off, 128, 0), (None, want_on, 0, 128)):
            d = self.restart(d, env=env)
            ids, s = self.gen(d, P)
            self.assertEqual(ids, want)
            self.assertEqual(s.store_tokens, 0, s)
            self.assertEqual(s.evaluated_tokens, len(P))
            self.assertGreaterEqual(len(s.rejected), 1, s)
            self.assertEqual(s.rejected[0].reason, "key_rotation")
            self.assertEqual(s.rejected[0].position, 0)
            self.assertIn(f"incompatible key rotation (blob n_rot_k={blob_rot}, runtime {run_rot})",
                          s.rejected[0].message)
            self.assertIn("incompatible key rotation", d.text())
            m = d.stub().Metrics(pb.MetricsRequest()).text
            self.assertGreaterEqual(metric(m, "warmd_cache_rejected_total"), 1)
            # the rewrite: the next daemon with the same setting hits
            d = self.restart(d, env=env)
            ids, s = self.gen(d, P)
            self.assertEqual(ids, want)
            self.assertEqual(len(s.rejected), 0, s)
            self.assertGreaterEqual(s.store_tokens, len(P) - 1, s)
        self.assertEqual(d.stop(), 0)

    def test_state_version(self):
        if not os.path.exists(PATCH):
            self.skipTest("warm-cache-patch not built")
        P = prompt(600, 4)
        d = self.new_daemon().start()
        want, _ = self.gen(d, P)
        self.assertEqual(d.stop(), 0)
        out = subprocess.run([PATCH, "--store", os.path.join(d.tmp, "cache"),
                              "--set-version", "1"], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertRegex(out.stdout, r"patched [1-9]\d* records")
        d = self.restart(d)
        ids, s = self.gen(d, P)
        self.assertEqual(ids, want)
        self.assertEqual((s.store_tokens, s.evaluated_tokens), (0, len(P)), s)
        self.assertGreaterEqual(len(s.rejected), 1, s)
        self.assertEqual(s.rejected[0].reason, "state_version")
        self.assertIn("incompatible state version (blob 1, runtime 3)", s.rejected[0].message)
        d = self.restart(d)
        ids, s = self.gen(d, P)
        self.assertEqual(ids, want)
        self.assertEqual(len(s.rejected), 0, s)
        self.assertGreaterEqual(s.store_tokens, len(P) - 1, s)
        self.assertEqual(d.stop(), 0)

    # ---- crash safety -------------------------------------------------------------------

    def test_kill9_during_writeback(self):
        A = prompt(1000, 5)
        B = prompt(2200, 6)
        d = self.new_daemon().start()
        want, _ = self.gen(d, A)
        # every record of A written (its 3 whole chunks and the tail): write-back is
        # asynchronous, and the tail may still be queued when B starts on a busy machine
        before = {e.key for e in self.wait_entries(d, -(-len(A) // 256))}
        # a long prompt, and the process killed while its records are being written
        stream = d.stub().Generate(pb.GenerateRequest(
            model="m", tokens=B, sampling=GREEDY, max_tokens=400), timeout=300)
        next(iter(stream))          # prefill done, chunks exported and queued
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait()
        try:
            list(stream)
        except grpc.RpcError:
            pass
        n = Daemon(d.tmp)
        self.daemons.append(n)
        n.start()
        self.assertNotIn("was corrupt", n.text()[n.log_start:])
        after = {e.key for e in self.entries(n)}
        self.assertLessEqual(before, after)
        ids, s = self.gen(n, A + prompt(10, 7), max_tokens=4)
        self.assertGreaterEqual(s.store_tokens, len(A) - 1, s)
        ids, s = self.gen(n, A)
        self.assertEqual(ids, want)
        self.assertEqual(n.stop(), 0)

    # ---- per-request options, RPCs, metrics ---------------------------------------------

    def test_skip_refresh_and_rpcs(self):
        P = prompt(600, 8)
        d = self.new_daemon().start()
        st = d.stub()
        # skip: neither read nor written
        want, s = self.gen(d, P, mode=pb.CACHE_MODE_SKIP)
        d = self.restart(d)
        self.assertEqual(self.entries(d), [])
        _, s = self.gen(d, P, mode=pb.CACHE_MODE_SKIP)
        self.assertEqual((s.store_tokens, s.evaluated_tokens), (0, len(P)))
        # use: written; after a restart restored
        ids, s = self.gen(d, P)
        self.assertEqual(ids, want)
        first = {e.key: e for e in self.wait_entries(d, 2)}
        d = self.restart(d)
        ids, s = self.gen(d, P)
        self.assertEqual(ids, want)
        self.assertGreaterEqual(s.store_tokens, len(P) - 1, s)
        # refresh: neither the store nor RAM is read (everything computed, although RAM
        # holds the prompt now), every entry written again
        time.sleep(0.01)
        ids, s = self.gen(d, P, mode=pb.CACHE_MODE_REFRESH)
        self.assertEqual(ids, want)
        self.assertEqual((s.ram_tokens, s.store_tokens, s.evaluated_tokens), (0, 0, len(P)))
        d = self.restart(d)
        again = {e.key: e for e in self.entries(d)}
        for k, e in first.items():
            self.assertIn(k, again)
            self.assertGreater(again[k].last_used_usec, e.last_used_usec)
        # the RPCs on one's own namespace
        st = d.stub()
        stats = st.CacheStats(pb.CacheStatsRequest())
        self.assertEqual(stats.entries, len(again))
        self.assertGreater(stats.bytes, 0)
        ent = sorted(again.values(), key=lambda e: e.position)
        self.assertEqual(ent[0].position, 0)
        self.assertEqual(ent[0].namespace, f"uid:{os.getuid()}")
        self.assertIn(ent[0].kind, ("chunk", "tail"))
        purged = st.CachePurge(pb.CachePurgeRequest())
        self.assertEqual(purged.entries, len(again))
        self.assertEqual(self.entries(d), [])
        m = st.Metrics(pb.MetricsRequest()).text
        for name in ("warmd_cache_lookups_total", "warmd_cache_writes_total",
                     "warmd_cache_writes_dropped_total", "warmd_cache_rejected_total",
                     "warmd_cache_evictions_total", "warmd_cache_bytes",
                     "warmd_prompt_tokens_store_total", "warmd_prompt_tokens_ram_total",
                     "warmd_prompt_tokens_prefill_total"):
            metric(m, name)
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    main()
