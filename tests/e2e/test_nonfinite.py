"""A model whose weights hold a NaN (warm-mkmodel's file with one float of
output_norm.weight overwritten, so every logit is NaN): Generate on it ends with INTERNAL
and a message naming the NaN, under the default sampling (which once read before the
sampler's candidate array) and greedy (which once answered token 0 as if nothing were
wrong). The daemon stays up: a good model's stream running at the same time finishes
with the same tokens it gives alone, the broken model answers the same way again, and
the daemon exits 0 on SIGTERM."""

import os
import re
import struct
import subprocess
import threading

from warmd_harness import BIN, DaemonTest, collect, grpc, main, pb

C = grpc.StatusCode
MKMODEL = os.path.join(BIN, "warm-mkmodel")
WARM_GGUF = os.path.join(BIN, "warm-gguf")
GREEDY = pb.Sampling(temperature=0)


def tensor_offset(path, name):
    """File offset of tensor name's data, from warm-gguf's listing (the data section's
    offset plus the tensor's offset in it)."""
    out = subprocess.run([WARM_GGUF, path], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    data = int(re.search(r"^data:\s+offset (\d+)", out, re.M).group(1))
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 6 and f[1] == name:
            return data + int(f[-2])
    raise AssertionError(f"{name} not listed by warm-gguf:\n{out}")


class NonFiniteTest(DaemonTest):
    def setUp(self):
        super().setUp()
        for tool in (MKMODEL, WARM_GGUF):
            if not os.path.exists(tool):
                self.skipTest(f"{os.path.basename(tool)} not built")
        self.d = self.daemon(config="threads = 1\n")
        for name in ("good", "broken"):
            subprocess.run([MKMODEL, "--arch", "llama", "--seed", "3", "-o",
                            os.path.join(self.d.models, name + ".gguf")],
                           check=True, capture_output=True, timeout=120)
        broken = os.path.join(self.d.models, "broken.gguf")
        at = tensor_offset(broken, "output_norm.weight")
        with open(broken, "r+b") as f:
            f.seek(at)
            self.assertEqual(len(f.read(4)), 4)
            f.seek(at)
            f.write(struct.pack("<f", float("nan")))
        self.d.start()
        self.st = self.d.stub()

    def broken_fails(self, **kw):
        e = self.assertCode(lambda: self.st.Generate(pb.GenerateRequest(
            model="broken", prompt="Once upon a time", max_tokens=8, **kw)), C.INTERNAL)
        self.assertIn("logits contain NaN at token 0", e.details())
        self.assertIn("the model produced non-finite values", e.details())

    def test_nan_weights(self):
        good = dict(model="good", prompt="Once upon a time", sampling=GREEDY, max_tokens=200)
        want, _, s = collect(self.st.Generate(pb.GenerateRequest(**good)))
        self.assertEqual(s.generated_tokens, len(want))
        self.assertGreater(len(want), 0)

        # A good stream at the same time as the failing ones.
        got = {}
        def run():
            got["ids"], _, got["summary"] = collect(self.st.Generate(pb.GenerateRequest(**good)))
        t = threading.Thread(target=run)
        t.start()
        self.broken_fails()  # the documented defaults: temperature 0.8, min_p 0.05
        self.broken_fails(sampling=GREEDY)
        self.broken_fails(sampling=pb.Sampling(temperature=1.0, top_k=5, top_p=0.9,
                                               repeat_penalty=1.3))
        t.join(300)
        self.assertFalse(t.is_alive())
        self.assertEqual(got["ids"], want)
        self.assertIsNotNone(got["summary"])

        # Nothing was wedged: both models answer as before.
        self.broken_fails()
        ids, _, _ = collect(self.st.Generate(pb.GenerateRequest(**good)))
        self.assertEqual(ids, want)
        self.assertIsNone(self.d.proc.poll())
        self.assertEqual(self.d.stop(), 0)


if __name__ == "__main__":
    main()
