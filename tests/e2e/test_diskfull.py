"""A full disk under the state directory (P1-6 DISK-BOUND), for real: a small tmpfs is
mounted as the daemon's state_dir and filled with a file while the daemon serves. The
daemon stays up and answers exactly as a daemon without a cache does; the log says "no
space left" once (with the path and what is free), never "corrupt"; every failed write is
counted in warmd_cache_write_errors_total; a prompt stored before the disk filled is
still restored from the store. Once the filler is deleted, new prompts are written again
("space is back", once) and come back from the store after a restart.

Needs root (mount); exits 77 otherwise, or where mounting tmpfs is refused."""

import errno
import os
import random
import subprocess
import sys
import tempfile
import time

from warmd_harness import BIN, SKIP, Daemon, DaemonTest, main, metric, pb

GREEDY = pb.Sampling(temperature=0)
MKMODEL = os.path.join(BIN, "warm-mkmodel")
N_VOCAB = 320
C = 256                 # cache_chunk_tokens (the default)
N_PROMPT = 600          # two chunks and a tail
FS_BYTES = 6 << 20      # the tmpfs: room for a few prompts' records
WAIT = 120.0            # cap of every poll (write-back is asynchronous)


def prompt(n, seed):
    rnd = random.Random(seed)
    return [rnd.randrange(3, N_VOCAB) for _ in range(n)]


def collect(stream):
    ids, summary = [], None
    for ev in stream:
        if ev.HasField("token"):
            if ev.token.id >= 0:
                ids.append(ev.token.id)
        elif ev.HasField("summary"):
            summary = ev.summary
    return ids, summary


def fill(path):
    """Writes one file until the filesystem is full; returns its size."""
    n, chunk = 0, 1 << 20
    buf = b"\xab" * chunk
    with open(path, "wb", buffering=0) as f:
        while chunk:
            try:
                n += f.write(buf[:chunk])
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                chunk //= 2
    return n


class DiskFullTest(DaemonTest):
    def setUp(self):
        super().setUp()
        if not os.path.exists(MKMODEL):
            self.skipTest("warm-mkmodel not built")
        self.mnt = os.path.join(self.tmp, "state")
        os.makedirs(self.mnt)
        out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES},mode=0755",
                              "tmpfs", self.mnt], capture_output=True, text=True)
        if out.returncode != 0:
            self.skipTest(f"cannot mount a tmpfs on {self.mnt}: {out.stderr.strip()}")
        self.mounted = True

    def tearDown(self):
        for d in self.daemons:
            if d.proc and d.proc.poll() is None:
                d.proc.kill()
                d.proc.wait()
        if getattr(self, "mounted", False):
            subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        super().tearDown()

    def new_daemon(self, name, config):
        tmp = os.path.join(self.tmp, name)
        os.makedirs(tmp)
        os.chmod(tmp, 0o755)
        d = Daemon(tmp, config="threads = 1\nparallel = 1\nctx_size = 2048\n" + config)
        self.daemons.append(d)
        path = os.path.join(d.models, "m.gguf")
        subprocess.run([MKMODEL, "--arch", "llama", "--n-embd", "128", "--n-layer", "2",
                        "--n-head", "2", "--n-head-kv", "1", "--head-dim", "64",
                        "--n-ff", "256", "--n-vocab", str(N_VOCAB), "--ctx", "4096",
                        "--type", "f16", "--seed", "7", "-o", path],
                       check=True, capture_output=True, timeout=120)
        return d

    def on_state(self, d):
        """Points d's state_dir at the tmpfs (its log and config stay outside it)."""
        with open(d.config) as f:
            cfg = f.read().replace(f"state_dir = {d.tmp}\n", f"state_dir = {self.mnt}\n")
        with open(d.config, "w") as f:
            f.write(cfg)

    def gen(self, d, tokens):
        return collect(d.stub().Generate(pb.GenerateRequest(
            model="m", tokens=tokens, sampling=GREEDY, max_tokens=8), timeout=300))

    def metrics(self, d):
        return d.stub().Metrics(pb.MetricsRequest()).text

    def poll(self, what, fn):
        end = time.monotonic() + WAIT
        while time.monotonic() < end:
            v = fn()
            if v:
                return v
            time.sleep(0.05)
        self.fail(f"after {WAIT:.0f} s still not: {what}")

    def settled(self, d):
        """Metrics once every queued record was tried (records are queued before the
        reply ends, so this follows the requests made so far)."""
        def done():
            m = self.metrics(d)
            return m if metric(m, "warmd_cache_write_queue") == 0 else None
        return self.poll("the write-back queue drained", done)

    def chunks(self, d):
        return sum(e.kind == "chunk" for e in
                   d.stub().CacheList(pb.CacheListRequest(limit=10000)).entries)

    def test_disk_full(self):
        A = prompt(N_PROMPT, 1)
        B = [prompt(N_PROMPT, 10 + i) for i in range(4)]
        Cn = prompt(N_PROMPT, 20)
        extra = prompt(12, 21)
        ref = self.new_daemon("ref", "cache_max_bytes = 0\n").start()
        want = {}
        for name, p in [("A", A), ("C", Cn), ("C+", Cn + extra)] + \
                [(f"B{i}", b) for i, b in enumerate(B)]:
            want[name], _ = self.gen(ref, p)
        self.assertEqual(ref.stop(), 0)

        d = self.new_daemon("d", "cache_max_bytes = 4M\n")
        self.on_state(d)
        d.start()
        ids, s = self.gen(d, A)
        self.assertEqual(ids, want["A"])
        self.poll("A's two chunks stored", lambda: self.chunks(d) >= N_PROMPT // C)
        self.assertEqual(metric(self.metrics(d), "warmd_cache_write_errors_total"), 0)

        filler = os.path.join(self.mnt, "filler")
        n = fill(filler)
        st = os.statvfs(self.mnt)
        print(f"  filled {self.mnt} with {n} bytes; {st.f_bfree * st.f_frsize} bytes free",
              file=sys.stderr)

        # distinct prompts while the disk is full: correct answers, writes fail
        for i, b in enumerate(B):
            ids, s = self.gen(d, b)
            self.assertEqual(ids, want[f"B{i}"])
            self.assertEqual(s.store_tokens, 0)
        m = self.settled(d)
        errors = metric(m, "warmd_cache_write_errors_total")
        # each prompt queued two chunks that cannot fit
        self.assertGreaterEqual(errors, len(B) * (N_PROMPT // C), m)
        # the prompt stored before is restored from the store (RAM holds the last B)
        ids, s = self.gen(d, A)
        self.assertEqual(ids, want["A"])
        self.assertGreaterEqual(s.store_tokens, (N_PROMPT // C) * C, s)
        self.assertEqual(d.proc.poll(), None)

        log = d.text()
        full = [l for l in log.splitlines() if "no space left on" in l]
        cache_warnings = [l for l in log.splitlines() if "prompt cache" in l and "warn" in l.lower()]
        print(f"  disk full: {int(errors)} write errors counted; {len(full)} 'no space' line(s), "
              f"{len(cache_warnings)} prompt-cache warning line(s):\n    " + "\n    ".join(full),
              file=sys.stderr)
        self.assertEqual(len(full), 1, log)
        self.assertIn(os.path.join(self.mnt, "cache"), full[0])
        self.assertRegex(full[0], r"\(\d+ (bytes|KiB) free\); writes paused, serving from what is stored")
        self.assertNotIn("corrupt", log.lower())
        self.assertNotIn("Input/output error", log)
        self.assertNotIn("space is back", log)

        # space comes back: new prompts are written again, said once
        os.unlink(filler)
        w0 = metric(self.metrics(d), "warmd_cache_writes_total")
        ids, s = self.gen(d, Cn)
        self.assertEqual(ids, want["C"])
        m = self.settled(d)
        self.assertGreaterEqual(metric(m, "warmd_cache_writes_total"), w0 + N_PROMPT // C, m)
        log = d.text()
        print("  space back: " + "".join(l for l in log.splitlines() if "space is back" in l),
              file=sys.stderr)
        self.assertEqual(log.count("space is back"), 1, log)
        self.assertEqual(sum("no space left on" in l for l in log.splitlines()), 1, log)

        # and a restart restores the new prompt from the store
        self.assertEqual(d.stop(), 0, d.text())
        with open(d.config) as f:
            cfg = f.read()
        n2 = Daemon(d.tmp)
        with open(n2.config, "w") as f:
            f.write(cfg)
        self.daemons.append(n2)
        n2.start()
        ids, s = self.gen(n2, Cn + extra)
        self.assertEqual(ids, want["C+"])
        self.assertGreaterEqual(s.store_tokens, (N_PROMPT // C) * C, s)
        self.assertNotIn("corrupt", n2.text().lower())
        self.assertEqual(n2.stop(), 0)


def can_mount():
    """None when a tmpfs can be mounted here, else why not."""
    if os.geteuid() != 0:
        return "needs root to mount a small tmpfs as the state directory"
    probe = tempfile.mkdtemp(prefix="warmd-diskfull-probe-")
    try:
        out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", probe],
                             capture_output=True, text=True)
        if out.returncode != 0:
            return f"cannot mount tmpfs: {(out.stderr or out.stdout).strip()}"
        subprocess.run(["umount", probe], capture_output=True)
        return None
    except OSError as e:
        return f"cannot run mount: {e}"
    finally:
        os.rmdir(probe)


if __name__ == "__main__":
    why = can_mount()
    if why:
        print(f"skipped: {why}", file=sys.stderr)
        sys.exit(SKIP)
    if not os.path.exists(MKMODEL):
        print(f"skipped: {MKMODEL} not built", file=sys.stderr)
        sys.exit(SKIP)
    main()
