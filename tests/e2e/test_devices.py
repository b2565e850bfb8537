"""Config `device`. device = auto on a machine (or build) without a usable CUDA
device runs on the CPU and says why once in the log; GetInfo lists the devices the loaded
models really use, with the bytes reserved there, and `features` names them; the metrics
carry the reserved bytes per device kind. device = cuda:0 where the engine cannot run on
CUDA is refused at model load with a message that names why. On a machine with a GPU
(skipped elsewhere): a daemon on cuda:0 serves as a CPU daemon does (greedy tokens, two
streams at once, a seeded sampler, stop strings, cancellation), and after a restart
restores a prompt from the store into the GPU's KV cache."""

import os
import random
import subprocess
import threading

from warmd_harness import BIN, Daemon, DaemonTest, collect, grpc, main, metric, pb, write_model

NOTE = "no usable CUDA device ("
GREEDY = pb.Sampling(temperature=0)


def prompt(n, seed, n_vocab=320):
    rnd = random.Random(seed)
    return [rnd.randrange(3, n_vocab) for _ in range(n)]


def gpu_model(path):
    """A llama the CUDA kernels take (sizes multiples of 32, GQA, q8_0 weights)."""
    subprocess.run([os.path.join(BIN, "warm-mkmodel"), "--arch", "llama", "--n-embd", "256",
                    "--n-layer", "4", "--n-head", "4", "--n-head-kv", "2", "--head-dim", "64",
                    "--n-ff", "512", "--n-vocab", "320", "--type", "q8_0", "--seed", "3", "-o", path],
                   check=True, capture_output=True, timeout=120)


class DevicesTest(DaemonTest):
    def test_auto_runs_on_cpu(self):
        d = self.daemon()
        write_model(os.path.join(d.models, "a.gguf"))
        write_model(os.path.join(d.models, "b.gguf"))
        d.start()
        st = d.stub()
        info = st.GetInfo(pb.GetInfoRequest())
        self.assertEqual(list(info.devices), [], "no model loaded: no device in use")
        self.assertNotIn("cpu", info.features)
        self.assertNotIn("cuda", info.features)
        st.LoadModel(pb.LoadModelRequest(model="a"))
        info = st.GetInfo(pb.GetInfoRequest())
        self.assertEqual([(x.name, x.kind) for x in info.devices], [("cpu", "cpu")])
        one = info.devices[0].reserved_bytes
        self.assertGreater(one, 0)
        self.assertIn("cpu", info.features)
        self.assertNotIn("cuda", info.features)
        # a second model on the same device: one row, its bytes added
        st.LoadModel(pb.LoadModelRequest(model="b"))
        info = st.GetInfo(pb.GetInfoRequest())
        self.assertEqual(len(info.devices), 1)
        self.assertEqual(info.devices[0].reserved_bytes, 2 * one)
        text = st.Metrics(pb.MetricsRequest()).text
        self.assertEqual(metric(text, "warmd_device_cpu_reserved_bytes"), 2 * one)
        self.assertEqual(metric(text, "warmd_device_cuda_reserved_bytes"), 0)
        log = d.text()
        self.assertEqual(log.count(NOTE), 1, log)
        self.assertIn("running on the CPU", log)

    def test_cpu_partitions_listed(self):
        d = self.daemon(config="device = cpu\ndevices = cpu,cpu\nsplit = tensor\n")
        write_model(os.path.join(d.models, "a.gguf"))
        d.start()
        st = d.stub()
        st.LoadModel(pb.LoadModelRequest(model="a"))
        info = st.GetInfo(pb.GetInfoRequest())
        self.assertEqual([x.name for x in info.devices], ["cpu0", "cpu1"])
        self.assertTrue(all(x.kind == "cpu" and x.reserved_bytes > 0 for x in info.devices))
        self.assertNotIn(NOTE, d.text(), "device = cpu asks for no GPU")

    def test_cuda_refused_with_reason(self):
        d = self.daemon(config="device = cuda:0\n")
        write_model(os.path.join(d.models, "a.gguf"))
        d.start()
        st = d.stub()
        with self.assertRaises(grpc.RpcError) as cm:
            st.LoadModel(pb.LoadModelRequest(model="a"))
        msg = cm.exception.details()
        self.assertIn("device cuda:0: ", msg)
        self.assertTrue(any(w in msg for w in ("no CUDA backend", "no GPU", "does not run")), msg)
        self.assertEqual(list(st.GetInfo(pb.GetInfoRequest()).devices), [])

    def test_bad_device_refused_at_start(self):
        d = self.daemon(config="device = gpu\n").start(wait=False)
        self.assertNotEqual(d.proc.wait(timeout=60), 0)
        self.assertIn('device "gpu" is not auto, cpu or cuda:N', d.text())

    # ---- on a GPU (skipped without one) -------------------------------------------------

    def gpu_daemon(self, config=""):
        """A daemon with device = cuda:0 and the GPU model loaded, or skipTest."""
        d = self.daemon(config="device = cuda:0\nthreads = 2\nparallel = 2\nctx_size = 2048\n" + config)
        gpu_model(os.path.join(d.models, "m.gguf"))
        d.start()
        try:
            d.stub().LoadModel(pb.LoadModelRequest(model="m"))
        except grpc.RpcError as e:
            if any(w in e.details() for w in ("no GPU", "no CUDA backend", "does not exist")):
                self.skipTest("no usable CUDA device: " + e.details())
            raise
        return d

    def gen(self, d, tokens, max_tokens=16, sampling=GREEDY, stop=()):
        return collect(d.stub().Generate(pb.GenerateRequest(
            model="m", tokens=tokens, sampling=sampling, max_tokens=max_tokens, stop=list(stop)),
            timeout=300))

    def test_gpu_serves_as_the_cpu(self):
        g = self.gpu_daemon()
        os.makedirs(os.path.join(self.tmp, "cpu"))
        c = Daemon(os.path.join(self.tmp, "cpu"), config="device = cpu\nthreads = 2\nparallel = 2\nctx_size = 2048\n")
        self.daemons.append(c)
        gpu_model(os.path.join(c.models, "m.gguf"))
        c.start()
        info = g.stub().GetInfo(pb.GetInfoRequest())
        self.assertEqual([(x.name, x.kind) for x in info.devices], [("cuda:0", "cuda")])
        self.assertTrue(info.devices[0].description)
        self.assertIn("cuda", info.features)
        self.assertIn("model 'm' reserved on cuda:0", g.text())
        # greedy: the same tokens (a long prompt: prefill in several steps)
        P, Q = prompt(700, 1), prompt(300, 2)
        want_p, text_p, _ = self.gen(c, P)
        want_q, _, _ = self.gen(c, Q)
        got, _, s = self.gen(g, P)
        self.assertEqual(got, want_p)
        # two streams at once (continuous batching), each as alone
        out = {}
        ts = [threading.Thread(target=lambda k, t: out.__setitem__(k, self.gen(g, t)[0]), args=(k, t))
              for k, t in (("p", P + [7]), ("q", Q))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(out["q"], want_q)
        self.assertEqual(out["p"], self.gen(c, P + [7])[0])
        # a seeded sampler repeats itself on the GPU
        samp = pb.Sampling(temperature=0.9, top_k=40, top_p=0.95, min_p=0.02, seed=7, repeat_penalty=1.1)
        a = self.gen(g, Q, sampling=samp)[0]
        self.assertEqual(a, self.gen(g, Q, sampling=samp)[0])
        self.assertEqual(len(a), 16)
        # a stop string ends the stream as on the CPU
        if len(text_p) > 6:
            stop = text_p[3:6]
            self.assertEqual(self.gen(g, P, stop=[stop])[1], self.gen(c, P, stop=[stop])[1])
        # a cancelled stream ends CANCELLED
        stream = g.stub().Generate(pb.GenerateRequest(model="m", tokens=Q, sampling=GREEDY, max_tokens=500),
                                   timeout=300)
        next(iter(stream))
        stream.cancel()
        with self.assertRaises(grpc.RpcError) as cm:
            list(stream)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.CANCELLED)
        # after a restart the prompt is restored from the store into the GPU's KV cache
        with open(g.config) as f:
            cfg = f.read()
        self.assertEqual(g.stop(), 0, g.text())
        g2 = Daemon(g.tmp)
        with open(g2.config, "w") as f:
            f.write(cfg)
        self.daemons.append(g2)
        g2.start()
        got, _, s = self.gen(g2, P)
        self.assertGreater(s.store_tokens, 0, s)
        self.assertEqual(got, want_p)
        self.assertIn("model 'm' reserved on cuda:0", g2.text()[g2.log_start:])


if __name__ == "__main__":
    main()
