"""The memory budget counts what a loaded model holds, and a model that does not fit is
refused before anything is unloaded (issue 33, item 4).

* A loaded model holds its private copy of the file (all of it), its KV cache and scratch:
  ListModels' memory_bytes and warmd_memory_bytes say so.
* Before a load the daemon counts the file plus an upper bound of its KV cache (every layer,
  the whole context, every sequence). A model whose file fits the budget but whose KV cache
  does not is refused with the numbers (need, file, KV, budget, held), and the idle model
  that has the only slot stays loaded; before, the idle model was unloaded first and the
  new one loaded past the budget.
* A model that needs more than the machine has (MemAvailable plus what unloading the idle
  models frees) is refused the same way, whatever the budget says; before, the idle model
  was unloaded and the load then failed to allocate its KV cache.
* A model that fits still takes the least recently used slot."""

import os
import re
import subprocess

from warmd_harness import BIN, DaemonTest, grpc, main, metric, pb

C = grpc.StatusCode
MKMODEL = os.path.join(BIN, "warm-mkmodel")
# the models' shape: K and V rows of n_head_kv x head_dim f16 values in each of 2 layers
N_LAYER, N_HEAD_KV, HEAD_DIM = 2, 2, 32
KV_ROW = N_HEAD_KV * HEAD_DIM * 2 * 2  # K and V, f16


class BudgetTest(DaemonTest):
    def mkmodel(self, path, ctx, seed=1):
        subprocess.run([MKMODEL, "--arch", "llama", "--n-embd", "64", "--n-layer", str(N_LAYER),
                        "--n-head", "2", "--n-head-kv", str(N_HEAD_KV), "--n-ff", "256",
                        "--n-vocab", "300", "--ctx", str(ctx), "--seed", str(seed), "-o", path],
                       check=True, capture_output=True, timeout=120)
        return os.path.getsize(path)

    def listing(self, st):
        return {m.name: m for m in st.ListModels(pb.ListModelsRequest()).models}

    def loaded(self, st):
        return sorted(n for n, m in self.listing(st).items() if m.loaded)

    def numbers(self, msg):
        m = re.search(r"needs (\d+) bytes \(its file (\d+) \+ KV cache up to (\d+)\)", msg)
        self.assertIsNotNone(m, msg)
        return tuple(int(x) for x in m.groups())

    def test_kv_cache_counts_before_anything_is_unloaded(self):
        parallel, budget = 2, 16 << 20
        # (on the CPU: what a GPU holds is the GPU's, not the host's budget)
        d = self.daemon(config=f"device = cpu\nthreads = 1\nparallel = {parallel}\n"
                               "ctx_size = 65536\nmax_loaded_models = 1\n"
                               f"memory_budget = {budget}\n")
        small = self.mkmodel(os.path.join(d.models, "small.gguf"), ctx=256, seed=1)
        # a file of the same size whose trained context, and so KV cache, is 256x larger
        long = self.mkmodel(os.path.join(d.models, "long.gguf"), ctx=65536, seed=2)
        kv_long = N_LAYER * 65536 * parallel * KV_ROW
        self.assertLess(long, budget)
        self.assertGreater(long + kv_long, budget)
        d.start()
        st = d.stub()
        st.LoadModel(pb.LoadModelRequest(model="small"))
        self.assertEqual(self.loaded(st), ["small"])
        # what it holds: its file (the private copy) and its KV cache, and some scratch
        held = self.listing(st)["small"].memory_bytes
        kv_small = N_LAYER * 256 * parallel * KV_ROW
        self.assertGreaterEqual(held, small + kv_small)
        self.assertLess(held, small + kv_small + (8 << 20))
        self.assertEqual(metric(st.Metrics(pb.MetricsRequest()).text, "warmd_memory_bytes"), held)

        e = self.assertCode(lambda: st.LoadModel(pb.LoadModelRequest(model="long")),
                            C.RESOURCE_EXHAUSTED)
        self.assertEqual(self.loaded(st), ["small"])  # not unloaded for a load that cannot fit
        msg = e.details()
        self.assertIn("does not fit the memory budget of %d bytes" % budget, msg)
        self.assertIn("loaded models hold %d bytes" % held, msg)
        self.assertIn("nothing was unloaded", msg)
        self.assertEqual(self.numbers(msg), (long + kv_long, long, kv_long))
        # a generation asking for it is refused the same way
        e = self.assertCode(lambda: list(st.Generate(pb.GenerateRequest(
            model="long", tokens=[1], max_tokens=1))), C.RESOURCE_EXHAUSTED)
        self.assertEqual(self.loaded(st), ["small"])
        self.assertIn("does not fit the memory budget", e.details())

        # one that fits takes the only slot from the idle model
        other = self.mkmodel(os.path.join(d.models, "other.gguf"), ctx=256, seed=3)
        st.LoadModel(pb.LoadModelRequest(model="other"))
        self.assertEqual(self.loaded(st), ["other"])
        self.assertGreaterEqual(self.listing(st)["other"].memory_bytes, other + kv_small)
        self.assertIn("held: its file %d" % other, d.text())
        self.assertEqual(d.stop(), 0)

    def test_more_than_the_machine_has_is_refused_before_anything_is_unloaded(self):
        # a budget far past the machine's memory: the machine is what refuses
        parallel, ctx = 256, 1 << 20
        d = self.daemon(config=f"device = cpu\nthreads = 1\nparallel = {parallel}\n"
                               f"ctx_size = {ctx}\nmax_loaded_models = 1\n"
                               "memory_budget = 1024T\n")
        self.mkmodel(os.path.join(d.models, "small.gguf"), ctx=64, seed=1)
        huge = self.mkmodel(os.path.join(d.models, "huge.gguf"), ctx=ctx, seed=2)
        kv = N_LAYER * ctx * parallel * KV_ROW  # 256 GiB
        with open("/proc/meminfo") as f:
            avail = next(int(l.split()[1]) << 10 for l in f if l.startswith("MemAvailable:"))
        if huge + kv <= avail:
            self.skipTest(f"this machine has {avail} bytes available, more than {huge + kv}")
        d.start()
        st = d.stub()
        st.LoadModel(pb.LoadModelRequest(model="small"))
        e = self.assertCode(lambda: st.LoadModel(pb.LoadModelRequest(model="huge")),
                            C.RESOURCE_EXHAUSTED)
        self.assertEqual(self.loaded(st), ["small"])
        msg = e.details()
        self.assertEqual(self.numbers(msg), (huge + kv, huge, kv))
        m = re.search(r"the machine has (\d+) bytes available \(MemAvailable (\d+), less 0 for "
                      r"loads in flight, plus (\d+) held by idle models", msg)
        self.assertIsNotNone(m, msg)
        have, mem_avail, idle = (int(x) for x in m.groups())
        self.assertEqual(have, mem_avail + idle)
        self.assertEqual(idle, self.listing(st)["small"].memory_bytes)
        self.assertIn("nothing was unloaded", msg)
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    main()
