"""P1-11 MMAP-SWAP: a loaded model's file replaced while it generates. A model was an mmap
of its file, so `cp new.gguf m.gguf` (which truncates, then writes) or a truncation made the
next forward pass read past the end of the file and SIGBUS killed warmd; a same-size copy
silently changed the weights under a running stream. Now a loaded model is a private
snapshot of the file: the daemon survives, in-flight streams complete with the old
model's exact output, and the next request sees that the file changed (inode, size,
mtime or ctime) and loads the new one (its fingerprint and its greedy output). `mv` over
the file behaves the same way.

Streams are slowed by the daemon's test hook (WARM_TEST_STALL_USEC sleeps before each
decode step), and the test checks, rather than assumes, that a stream was still running
when the file was replaced."""

import os
import shutil
import subprocess
import time

from warmd_harness import BIN, START_TIMEOUT, DaemonTest, grpc, main, metric, pb

C = grpc.StatusCode
MKMODEL = os.path.join(BIN, "warm-mkmodel")
GREEDY = pb.Sampling(temperature=0)
N_VOCAB = 320
PROMPT = [1, 17, 42, 99, 230, 5, 77, 140]
MAX_TOKENS = 40
STALL_USEC = 50000


class ModelReplaceTest(DaemonTest):
    def setUp(self):
        super().setUp()
        if not os.path.exists(MKMODEL):
            self.skipTest("warm-mkmodel not built")

    def mkmodel(self, path, seed, n_layer=2):
        subprocess.run([MKMODEL, "--arch", "llama", "--n-embd", "128", "--n-layer",
                        str(n_layer), "--n-head", "2", "--head-dim", "64", "--n-ff", "256",
                        "--n-vocab", str(N_VOCAB), "--ctx", "2048", "--type", "f16",
                        "--seed", str(seed), "-o", path],
                       check=True, capture_output=True, timeout=120)

    def start(self, new_layers):
        """A daemon serving m (seed 7) and other (seed 8, the replacement's bytes)."""
        d = self.daemon(config="threads = 1\nparallel = 2\nctx_size = 512\n"
                               "max_loaded_models = 4\n",
                        env={"WARM_TEST_STALL_USEC": str(STALL_USEC)})
        self.path = os.path.join(d.models, "m.gguf")
        self.new = os.path.join(d.models, "other.gguf")
        self.mkmodel(self.path, 7)
        self.mkmodel(self.new, 8, new_layers)
        d.start()
        self.st = d.stub()
        self.old_ids = self.generate("m")
        self.new_ids = self.generate("other")
        # the premise: the two models answer differently
        self.assertNotEqual(self.old_ids, self.new_ids)
        self.old_fp = self.fingerprint("m")
        self.new_fp = self.fingerprint("other")
        self.assertNotEqual(self.old_fp, self.new_fp)
        return d

    def generate(self, model):
        ids = []
        for ev in self.st.Generate(pb.GenerateRequest(model=model, tokens=PROMPT,
                                                      sampling=GREEDY, max_tokens=MAX_TOKENS)):
            if ev.HasField("token"):
                ids.append(ev.token.id)
            elif ev.HasField("summary"):
                self.assertEqual(ev.summary.stop_reason, pb.STOP_REASON_MAX_TOKENS)
        return ids

    def fingerprint(self, model):
        for m in self.st.ListModels(pb.ListModelsRequest()).models:
            if m.name == model:
                self.assertTrue(m.loaded, model)
                return m.fingerprint
        self.fail(f"model {model} not listed")

    def replace_during_stream(self, d, replace):
        """Starts a stream on m, replaces the file once its first token arrived, and
        returns the stream's token ids (raising its RpcError, if any)."""
        it = self.st.Generate(pb.GenerateRequest(model="m", tokens=PROMPT, sampling=GREEDY,
                                                 max_tokens=MAX_TOKENS))
        first = next(it)
        self.assertTrue(first.HasField("token"))
        replace()
        # The stream is still running, so its next forward passes read the weights after
        # the replacement (otherwise this test would prove nothing).
        depth = metric(self.st.Metrics(pb.MetricsRequest()).text, "warmd_queue_depth")
        self.assertGreaterEqual(depth, 1, "the stream ended before the file was replaced")
        ids = [first.token.id]
        try:
            for ev in it:
                if ev.HasField("token"):
                    ids.append(ev.token.id)
                elif ev.HasField("summary"):
                    self.assertEqual(ev.summary.stop_reason, pb.STOP_REASON_MAX_TOKENS)
        except grpc.RpcError as e:
            end = time.monotonic() + START_TIMEOUT
            while d.proc.poll() is None and time.monotonic() < end:
                time.sleep(0.05)
            rc = d.proc.poll()
            self.fail(f"the stream failed ({e.code().name}: {e.details()}); warmd "
                      + ("is alive" if rc is None else f"exited with {rc}"))
        return ids

    def check_survived_and_reloads(self, d, in_flight):
        self.assertIsNone(d.proc.poll(), "warmd died:\n" + d.text())
        # The in-flight stream ran to its end on the model it started with.
        self.assertEqual(in_flight, self.old_ids)
        # The next request loads the file that is there now.
        self.assertEqual(self.generate("m"), self.new_ids)
        self.assertEqual(self.fingerprint("m"), self.new_fp)
        self.assertIn("model 'm': its file changed on disk", d.text())
        # The old copy is freed once its last stream ended.
        end = time.monotonic() + START_TIMEOUT
        while d.text().count("unloading model 'm'") < 1 and time.monotonic() < end:
            time.sleep(0.05)
        self.assertGreaterEqual(d.text().count("unloading model 'm'"), 1, d.text())
        self.assertEqual(d.stop(), 0, d.text())

    def test_cp_smaller_model_over_it(self):
        """cp truncates the file and writes a shorter one: the old mapping faulted."""
        d = self.start(new_layers=1)
        self.assertLess(os.path.getsize(self.new), os.path.getsize(self.path))
        ids = self.replace_during_stream(d, lambda: shutil.copyfile(self.new, self.path))
        self.check_survived_and_reloads(d, ids)

    def test_cp_same_size_model_over_it(self):
        """An in-place rewrite with the same size faults nowhere: the old mapping read the
        new bytes, half a model of each."""
        d = self.start(new_layers=2)
        self.assertEqual(os.path.getsize(self.new), os.path.getsize(self.path))
        ids = self.replace_during_stream(d, lambda: shutil.copyfile(self.new, self.path))
        self.check_survived_and_reloads(d, ids)

    def test_truncate(self):
        d = self.start(new_layers=1)
        size = os.path.getsize(self.path)
        ids = self.replace_during_stream(d, lambda: os.truncate(self.path, size // 2))
        self.assertIsNone(d.proc.poll(), "warmd died:\n" + d.text())
        self.assertEqual(ids, self.old_ids)
        # What is on disk now is no model: the next request says so ...
        e = self.assertCode(lambda: self.generate("m"), C.FAILED_PRECONDITION,
                            "model 'm' is not available")
        self.assertIn("past the end", e.details())
        # ... and once a good file is back, it is served.
        shutil.copyfile(self.new, self.path)
        self.check_survived_and_reloads(d, ids)

    def test_mv_over_it(self):
        """rename() leaves the old inode to whoever has it open: the stream completes as
        before, and the next request loads the new file."""
        d = self.start(new_layers=1)
        tmp = self.path + ".tmp"
        shutil.copyfile(self.new, tmp)
        ids = self.replace_during_stream(d, lambda: os.rename(tmp, self.path))
        self.check_survived_and_reloads(d, ids)


if __name__ == "__main__":
    main()
