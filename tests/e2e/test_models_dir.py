"""The models directory explains itself (issue 17, items 6-10).

* Every `*.gguf` the scan skips is listed by ListModels as unavailable with its reason and
  logged once (empty file, bad magic, malformed header, unknown architecture, a ggml type
  warmd has no kernels for, a name with characters not allowed); `.GGUF` is accepted; a
  symlink to a regular file owned by root or the service user is followed, one to anything
  else is refused with a message; a request for a skipped model says why, a typo gets
  "did you mean".
* A failed load never unloads a resident model: with max_loaded_models = 2 and two models
  resident, a request for a broken third (or one too big for the memory budget) leaves
  both resident.
* ListModels tells architecture, quantization mix, parameters and trained context without
  loading; ShowModel adds the metadata, the chat template family and the cache settings.
* ctx_size is capped at the trained context unless ctx_above_trained; then a prompt
  longer than the trained context gets a warning in the summary and the log."""

import json
import os
import shutil
import struct
import subprocess

from warmd_harness import BIN, DaemonTest, grpc, main, pb

C = grpc.StatusCode
MKMODEL = os.path.join(BIN, "warm-mkmodel")
GREEDY = pb.Sampling(temperature=0)

# GGUF value types and the ggml type ids used below
U32, F32, STR = 4, 6, 8
T_F32, T_IQ2_XS = 0, 17


def gguf_bytes(kvs, tensors):
    """A GGUF v3 file: kvs = [(key, type, value)], tensors = [(name, type, dims, n_bytes)],
    data zero-filled, each tensor aligned to 32 bytes."""
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, t, v in kvs:
        out += s(key) + struct.pack("<I", t)
        out += {U32: lambda: struct.pack("<I", v), F32: lambda: struct.pack("<f", v),
                STR: lambda: s(v)}[t]()
    offset = 0
    for name, t, dims, n in tensors:
        out += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", t, offset)
        offset += (n + 31) // 32 * 32
    out += b"\0" * (-len(out) % 32)
    return out + b"\0" * offset


def llama_kvs(arch="llama", n_embd=256):
    return [("general.architecture", STR, arch),
            (f"{arch}.context_length", U32, 1024),
            (f"{arch}.embedding_length", U32, n_embd),
            (f"{arch}.block_count", U32, 1),
            (f"{arch}.feed_forward_length", U32, 256),
            (f"{arch}.attention.head_count", U32, 4),
            (f"{arch}.attention.layer_norm_rms_epsilon", F32, 1e-5)]


def iq2_model():
    """A llama file whose blk.0.attn_q.weight is IQ2_XS (a known ggml type without kernels);
    the other tensors f32."""
    E, V, FF = 256, 64, 256
    t = [("token_embd.weight", T_F32, [E, V], E * V * 4),
         ("output_norm.weight", T_F32, [E], E * 4),
         ("blk.0.attn_norm.weight", T_F32, [E], E * 4),
         ("blk.0.attn_q.weight", T_IQ2_XS, [E, E], E // 256 * 74 * E)]
    for name, (a, b) in [("attn_k", (E, E)), ("attn_v", (E, E)), ("attn_output", (E, E)),
                         ("ffn_gate", (E, FF)), ("ffn_up", (E, FF)), ("ffn_down", (FF, E))]:
        t.append((f"blk.0.{name}.weight", T_F32, [a, b], a * b * 4))
    t.append(("blk.0.ffn_norm.weight", T_F32, [E], E * 4))
    return gguf_bytes(llama_kvs(), t)


class ModelsDirTest(DaemonTest):
    def setUp(self):
        super().setUp()
        if not os.path.exists(MKMODEL):
            self.skipTest("warm-mkmodel not built")

    def mkmodel(self, path, seed=1, n_ff=256, ctx=2048, extra=()):
        subprocess.run([MKMODEL, "--arch", "llama", "--n-embd", "64", "--n-layer", "2",
                        "--n-head", "2", "--n-ff", str(n_ff), "--n-vocab", "300",
                        "--ctx", str(ctx), "--seed", str(seed), *extra, "-o", path],
                       check=True, capture_output=True, timeout=120)

    def write(self, path, data):
        with open(path, "wb") as f:
            f.write(data)

    def listing(self, st):
        return {m.name: m for m in st.ListModels(pb.ListModelsRequest()).models}

    def test_skipped_files_are_listed_with_their_reason(self):
        d = self.daemon(config="threads = 1\nparallel = 1\nctx_size = 256\n")
        m = d.models
        self.mkmodel(os.path.join(m, "good.gguf"))
        shutil.copy(os.path.join(m, "good.gguf"), os.path.join(m, "Upper.GGUF"))
        shutil.copy(os.path.join(m, "good.gguf"), os.path.join(m, "my model.gguf"))
        self.write(os.path.join(m, "empty.gguf"), b"")
        self.write(os.path.join(m, "junk.gguf"), b"<html>not a model</html>")
        self.write(os.path.join(m, "cut.gguf"), iq2_model()[:200])
        self.write(os.path.join(m, "mamba.gguf"), gguf_bytes(llama_kvs("mamba"), []))
        self.write(os.path.join(m, "iq2.gguf"), iq2_model())
        d.start()
        st = d.stub()
        models = self.listing(st)
        want_skipped = {
            "empty": "empty file",
            "junk": "not a GGUF file: it starts with '<htm'",
            "cut": "malformed GGUF",
            "mamba": "unknown architecture 'mamba'",
            "iq2": "tensor 'blk.0.attn_q.weight' is IQ2_XS, which warmd does not support yet; "
                   "supported: F32, F16",
            "my model": "not a model name",
        }
        self.assertEqual(sorted(models), sorted(["good", "Upper", *want_skipped]))
        for name in ("good", "Upper"):
            self.assertTrue(models[name].available, models[name])
            self.assertEqual(models[name].unavailable_reason, "")
        for name, reason in want_skipped.items():
            self.assertFalse(models[name].available, name)
            self.assertIn(reason, models[name].unavailable_reason, name)
        # warm-gguf still lists the file the loader refuses
        out = subprocess.run([os.path.join(BIN, "warm-gguf"), os.path.join(m, "iq2.gguf")],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("iq2_xs", out.stdout)
        # the metadata without loading: architecture, quantization mix, parameters, context
        g = models["good"]
        self.assertFalse(g.loaded)
        self.assertEqual((g.architecture, g.trained_context), ("llama", 2048))
        self.assertTrue(g.quantization.startswith("F32 100%"), g.quantization)
        self.assertGreater(g.n_params, 64 * 300)
        self.assertEqual(models["iq2"].architecture, "llama")
        self.assertIn("IQ2_XS", models["iq2"].quantization)
        # the count of available models leaves the skipped ones out
        self.assertEqual(st.GetInfo(pb.GetInfoRequest()).models_available, 2)
        # each skipped file is logged once, however often the directory is scanned
        for _ in range(3):
            self.listing(st)
        log = d.text()
        for name in want_skipped:
            self.assertEqual(log.count(f"skipping '{name}'"), 1, (name, log))
        # a request for a skipped model says why; a typo gets a suggestion
        for name, reason in [("junk", "not a GGUF file"), ("iq2", "is IQ2_XS"),
                             ("my model", "not a model name")]:
            self.assertCode(lambda: list(st.Generate(pb.GenerateRequest(
                model=name, tokens=[1], max_tokens=1))), C.FAILED_PRECONDITION, reason)
        self.assertCode(lambda: list(st.Generate(pb.GenerateRequest(
            model="goood", tokens=[1], max_tokens=1))), C.NOT_FOUND, "did you mean 'good'?")
        self.assertCode(lambda: st.Tokenize(pb.TokenizeRequest(model="upper", text="a")),
                        C.NOT_FOUND, "did you mean 'Upper'?")
        # .GGUF serves
        self.assertGreater(self.collect(st, "Upper")[2].generated_tokens, 0)
        # a fixed file is served without a restart
        shutil.copy(os.path.join(m, "good.gguf"), os.path.join(m, "junk.gguf"))
        self.assertGreater(self.collect(st, "junk")[2].generated_tokens, 0)
        self.assertEqual(d.stop(), 0)

    def collect(self, st, model, **kw):
        from warmd_harness import collect
        return collect(st.Generate(pb.GenerateRequest(model=model, tokens=[1, 5, 9],
                                                      max_tokens=4, sampling=GREEDY, **kw)))

    def test_symlinks(self):
        d = self.daemon(config="threads = 1\nparallel = 1\nctx_size = 256\n")
        outside = os.path.join(self.tmp, "downloads")
        os.makedirs(outside)
        target = os.path.join(outside, "real.gguf")
        self.mkmodel(target)
        os.symlink(target, os.path.join(d.models, "linked.gguf"))
        os.symlink(outside, os.path.join(d.models, "dir.gguf"))
        os.symlink(os.path.join(outside, "nothing.gguf"), os.path.join(d.models, "dangling.gguf"))
        os.symlink("/proc/self/fd/0", os.path.join(d.models, "magic.gguf"))
        foreign = None
        if os.geteuid() == 0:  # a file owned by another user (needs chown)
            foreign = os.path.join(outside, "foreign.gguf")
            shutil.copy(target, foreign)
            os.chown(foreign, 12345, 12345)
            os.symlink(foreign, os.path.join(d.models, "foreign.gguf"))
        d.start()
        st = d.stub()
        models = self.listing(st)
        self.assertTrue(models["linked"].available, models["linked"])
        self.assertGreater(self.collect(st, "linked")[2].generated_tokens, 0)
        self.assertIn("does not point to a regular file", models["dir"].unavailable_reason)
        self.assertIn("points to nothing", models["dangling"].unavailable_reason)
        self.assertFalse(models["magic"].available)
        self.assertIn("symlink to '/proc/self/fd/0'", models["magic"].unavailable_reason)
        if foreign:
            self.assertFalse(models["foreign"].available)
            self.assertIn("belongs to uid 12345", models["foreign"].unavailable_reason)
            self.assertCode(lambda: list(st.Generate(pb.GenerateRequest(
                model="foreign", tokens=[1], max_tokens=1))), C.FAILED_PRECONDITION,
                "only files owned by root or by warmd's user")
        self.assertEqual(d.stop(), 0)

    def test_failed_load_keeps_resident_models(self):
        """max_loaded_models = 2, both slots taken by idle models: a broken third, and one
        too big for the memory budget, are refused and both stay resident. (Before, the
        least recently used model was unloaded first, then the load failed.)"""
        d = self.daemon(config="threads = 1\nparallel = 1\nctx_size = 256\n"
                               "max_loaded_models = 2\nmemory_budget = 4M\n")
        self.mkmodel(os.path.join(d.models, "a.gguf"), seed=1)
        self.mkmodel(os.path.join(d.models, "b.gguf"), seed=2)
        self.mkmodel(os.path.join(d.models, "big.gguf"), seed=3, n_ff=8192)
        self.assertGreater(os.path.getsize(os.path.join(d.models, "big.gguf")), 4 << 20)
        d.start()
        st = d.stub()
        for name in ("a", "b"):
            st.LoadModel(pb.LoadModelRequest(model=name))
        loaded = lambda: sorted(n for n, m in self.listing(st).items() if m.loaded)
        self.assertEqual(loaded(), ["a", "b"])
        # broken files dropped in after the start: the request is what finds them
        self.write(os.path.join(d.models, "iq2.gguf"), iq2_model())
        self.write(os.path.join(d.models, "mamba.gguf"), gguf_bytes(llama_kvs("mamba"), []))
        # (residency first: it is the point; the messages after)
        e = self.assertCode(lambda: list(st.Generate(pb.GenerateRequest(
            model="iq2", tokens=[1], max_tokens=1))), C.FAILED_PRECONDITION)
        self.assertEqual(loaded(), ["a", "b"])
        self.assertIn("IQ2_XS", e.details())
        e = self.assertCode(lambda: st.LoadModel(pb.LoadModelRequest(model="mamba")),
                            C.FAILED_PRECONDITION)
        self.assertEqual(loaded(), ["a", "b"])
        self.assertIn("unknown architecture", e.details())
        e = self.assertCode(lambda: st.LoadModel(pb.LoadModelRequest(model="big")),
                            C.RESOURCE_EXHAUSTED)
        self.assertEqual(loaded(), ["a", "b"])
        self.assertIn("does not fit the memory budget", e.details())
        # a model that does fit still takes the least recently used slot
        self.mkmodel(os.path.join(d.models, "c.gguf"), seed=4)
        st.LoadModel(pb.LoadModelRequest(model="c"))
        self.assertEqual(loaded(), ["b", "c"])
        self.assertEqual(d.stop(), 0)

    def test_show_model(self):
        d = self.daemon(config="threads = 1\nparallel = 2\nctx_size = 4096\n"
                               "cache_type_k = q8_0\n")
        self.mkmodel(os.path.join(d.models, "chat.gguf"), ctx=1024,
                     extra=("--head-dim", "64", "--chat-template", "chatml"))
        self.write(os.path.join(d.models, "junk.gguf"), b"nope")
        d.start()
        st = d.stub()
        r = st.ShowModel(pb.ShowModelRequest(model="chat"))
        self.assertFalse(r.model.loaded)
        self.assertEqual(r.model.architecture, "llama")
        self.assertEqual(r.chat_template, "chatml")
        meta = {e.key: e for e in r.metadata}
        self.assertEqual(meta["llama.context_length"].value, "1024")
        self.assertEqual(meta["llama.context_length"].type, "uint32")
        self.assertIn("items]", meta["tokenizer.ggml.tokens"].value)
        self.assertEqual((r.n_layer, r.n_embd, r.n_head, r.head_dim_k), (2, 64, 2, 64))
        # ctx_size 4096 capped at the trained 1024; a q8_0 key cache with 64-wide heads
        # is rotated, the f16 value cache is not
        self.assertEqual((r.ctx_size, r.parallel), (1024, 2))
        self.assertEqual((r.cache_type_k, r.cache_type_v), ("q8_0", "f16"))
        self.assertEqual((r.rotate_k, r.rotate_v), (True, False))
        self.assertGreater(r.cache_chunk_tokens, 0)
        j = st.ShowModel(pb.ShowModelRequest(model="junk"))
        self.assertFalse(j.model.available)
        self.assertIn("not a GGUF file", j.model.unavailable_reason)
        self.assertCode(lambda: st.ShowModel(pb.ShowModelRequest(model="chta")),
                        C.NOT_FOUND, "did you mean 'chat'?")
        self.assertEqual(d.stop(), 0)

    def warmctl(self, d, *args, rc=0):
        r = subprocess.run([os.path.join(BIN, "warmctl"), "--socket", d.socket, *args],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, rc, (args, r.stdout, r.stderr))
        return r

    def test_warmctl_models_and_show(self):
        """warmctl models: architecture, parameters, trained context and weight types
        without loading, then the skipped files with their reasons; warmctl show: the
        metadata, the chat template family and the cache; a typo gets "did you mean"."""
        d = self.daemon(config="threads = 1\nparallel = 1\nctx_size = 512\n")
        self.mkmodel(os.path.join(d.models, "chat.gguf"), ctx=1024,
                     extra=("--type", "q8_0", "--chat-template", "chatml"))
        self.write(os.path.join(d.models, "junk.gguf"), b"nope")
        d.start()
        out = self.warmctl(d, "models").stdout
        row = next(l for l in out.splitlines() if l.startswith("chat "))
        for cell in ("llama", "1024", "no", "Q8_0"):
            self.assertIn(cell, row.split(), (cell, out))
        self.assertIn("skipped (not served):\n  junk: not a GGUF file: it starts with 'nope'",
                      out)
        doc = json.loads(self.warmctl(d, "--json", "models").stdout)
        chat = next(m for m in doc["models"] if m["name"] == "chat")
        self.assertEqual((chat["architecture"], chat["trained_context"], chat["loaded"]),
                         ("llama", 1024, False))
        self.assertTrue(chat["quantization"].startswith("Q8_0"), chat)
        self.assertGreater(chat["n_params"], 0)
        junk = next(m for m in doc["models"] if m["name"] == "junk")
        self.assertFalse(junk["available"])
        out = self.warmctl(d, "show", "chat").stdout
        self.assertIn("chat template: chatml", out)
        self.assertIn("cache:         512 tokens x 1 sequences, K f16, V f16", out)
        self.assertIn("llama.context_length", out)
        doc = json.loads(self.warmctl(d, "--json", "show", "chat").stdout)
        self.assertEqual(doc["metadata"]["llama.context_length"], "1024")
        self.assertEqual(doc["cache"]["ctx_size"], 512)
        r = self.warmctl(d, "show", "caht", rc=1)
        self.assertIn("did you mean 'chat'?", r.stderr)
        r = self.warmctl(d, "run", "junk", "hello", rc=1)
        self.assertIn("model 'junk' is not available: not a GGUF file", r.stderr)
        self.assertEqual(d.stop(), 0)

    def test_context_capped_at_training(self):
        """A model trained for 64 tokens: ctx_size 256 gives it 64 (a longer prompt is
        refused naming the context); with ctx_above_trained it gets 256 and a prompt past
        64 tokens is served with a warning in the summary and the log."""
        for allow in (False, True):
            with self.subTest(allow=allow):
                tmp = os.path.join(self.tmp, f"allow{int(allow)}")
                os.makedirs(tmp)
                from warmd_harness import Daemon
                d = Daemon(tmp, config="threads = 1\nparallel = 1\nctx_size = 256\n"
                           f"ctx_above_trained = {'yes' if allow else 'no'}\n")
                self.daemons.append(d)
                self.mkmodel(os.path.join(d.models, "short.gguf"), ctx=64)
                d.start()
                st = d.stub()
                show = st.ShowModel(pb.ShowModelRequest(model="short"))
                self.assertEqual(show.ctx_size, 256 if allow else 64)
                prompt = [1] + [5 + i % 200 for i in range(99)]
                if not allow:
                    self.assertCode(lambda: self.collect_tokens(st, prompt),
                                    C.INVALID_ARGUMENT, "it must have 1..64")
                    self.assertIn("trained for", d.text())
                else:
                    _, _, s = self.collect_tokens(st, prompt)
                    self.assertEqual(s.prompt_tokens, 100)
                    self.assertTrue(any("trained context of 64" in w for w in s.warnings),
                                    s.warnings)
                    self.assertIn("trained context of 64", d.text())
                self.assertEqual(d.stop(), 0)

    def collect_tokens(self, st, prompt):
        from warmd_harness import collect
        return collect(st.Generate(pb.GenerateRequest(model="short", tokens=prompt,
                                                      max_tokens=2, sampling=GREEDY)))


if __name__ == "__main__":
    main()
