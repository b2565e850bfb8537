"""Embeddings through the daemon's Embed RPC with the four reference embedding models of
../shared/models/embed (bert-tiny, nomic-bert-tiny, qwen3-embed-tiny, gemma-embed-tiny;
skipped without them): every reference input reproduces llama.cpp's vectors (.normed, and
.pooled with raw) within the README's thresholds, the text of I1 tokenizes to the same
ids, a batch of all inputs equals them one by one, truncate false refuses an over-long
input naming it and true cuts it, dimensions truncate and renormalize, the in-memory
cache answers a repeated input with the same vector (cached_inputs and the hit counter say
so), an Embed completes while a Generate streams on a chat model (ordered by events: the
stream is still running when the Embed answers), a chat model refuses Embed and an
embedding model refuses Generate and Chat, both naming the model, and ShowModel and
ListModels describe an embedding model with both models resident."""

import json
import os
import shutil
import struct
import subprocess
import sys

from warmd_harness import BIN, SHARED, DaemonTest, grpc, main, metric, pb

C = grpc.StatusCode
EMBED = os.path.join(SHARED, "embed") if SHARED else ""
STORIES = os.path.join(SHARED, "stories260K.gguf") if SHARED else ""
MODELS = ("bert-tiny", "nomic-bert-tiny", "qwen3-embed-tiny", "gemma-embed-tiny")
I1_TEXT = "The quick brown fox jumps over the lazy dog."
TOL_NORMED, TOL_COSINE, TOL_RAW_REL = 1e-3, 0.99999, 3e-3


def read_embd(path):
    """An EMBD file (README: 24-byte header, then f32 rows): a list of rows."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"EMBD\0\0\0\1", path
    n_embd, n_rows = struct.unpack_from("<II", data, 8)
    vals = struct.unpack_from(f"<{n_embd * n_rows}f", data, 24)
    return [list(vals[i * n_embd:(i + 1) * n_embd]) for i in range(n_rows)]


def read_ids(path):
    rows = {}
    with open(path) as f:
        for line in f:
            if line.startswith("ids"):
                k, v = line.split(":", 1)
                rows[int(k[3:])] = [int(x) for x in v.split()]
    return [rows[i] for i in sorted(rows)]


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    aa = sum(x * x for x in a) ** 0.5
    bb = sum(y * y for y in b) ** 0.5
    return ab / (aa * bb) if aa and bb else 0.0


def tokens_req(model, seqs, **kw):
    return pb.EmbedRequest(model=model, token_inputs=[pb.TokenList(tokens=s) for s in seqs], **kw)


def vectors(resp):
    return [list(v.values) for v in resp.embeddings]


class EmbedTest(DaemonTest):
    def setUp(self):
        super().setUp()
        if not EMBED or not os.path.exists(os.path.join(EMBED, "bert-tiny.gguf")):
            self.skipTest("embed/*.gguf not found under WARM_SHARED_MODELS")

    def start(self, config="", env=None, stories=False):
        d = self.daemon(config="threads = 1\nmax_loaded_models = 8\n" + config, env=env)
        for m in MODELS:
            shutil.copy(os.path.join(EMBED, m + ".gguf"), d.models)
        if stories:
            if not os.path.exists(STORIES):
                self.skipTest("stories260K.gguf not found")
            shutil.copy(STORIES, os.path.join(d.models, "stories.gguf"))
        d.start()
        return d, d.stub()

    def assertClose(self, got, want, tol_abs, what):
        self.assertEqual(len(got), len(want), what)
        diff = max(abs(a - b) for a, b in zip(got, want))
        self.assertLessEqual(diff, tol_abs, f"{what}: max |d| {diff}")

    def test_reference_vectors(self):
        d, st = self.start()
        for m in MODELS:
            for i in range(1, 5):
                base = os.path.join(EMBED, f"{m}-I{i}")
                seqs = read_ids(base + ".txt")
                normed, pooled = read_embd(base + ".normed"), read_embd(base + ".pooled")
                r = st.Embed(tokens_req(m, seqs))
                self.assertEqual(r.model, m)
                self.assertEqual(r.prompt_tokens, sum(map(len, seqs)))
                got = vectors(r)
                self.assertEqual(len(got), len(seqs))
                for s, (g, w) in enumerate(zip(got, normed)):
                    self.assertClose(g, w, TOL_NORMED, f"{m} I{i} seq {s} normed")
                    self.assertGreaterEqual(cosine(g, w), TOL_COSINE, f"{m} I{i} seq {s}")
                raw = vectors(st.Embed(tokens_req(m, seqs, raw=True)))
                top = max(abs(x) for row in pooled for x in row)
                for s, (g, w) in enumerate(zip(raw, pooled)):
                    self.assertClose(g, w, TOL_RAW_REL * top, f"{m} I{i} seq {s} raw")
            # I1 as text: the tokenizer's specials, the same vector
            ids = read_ids(os.path.join(EMBED, f"{m}-I1.txt"))[0]
            r = st.Embed(pb.EmbedRequest(model=m, inputs=[I1_TEXT]))
            self.assertEqual(r.prompt_tokens, len(ids), m)
            self.assertClose(vectors(r)[0], read_embd(os.path.join(EMBED, f"{m}-I1.normed"))[0],
                             TOL_NORMED, f"{m} I1 text")

    def test_batch_equals_one_by_one(self):
        # one by one first; then, after a restart (an empty cache), all at once (several
        # passes where they do not fit one)
        d, st = self.start()
        seqs = {m: [s for i in range(1, 5) for s in read_ids(os.path.join(EMBED, f"{m}-I{i}.txt"))]
                for m in MODELS}
        alone = {m: [vectors(st.Embed(tokens_req(m, [s])))[0] for s in seqs[m]] for m in MODELS}
        d.stop()
        d.start()
        st = d.stub()
        for m in MODELS:
            r = st.Embed(tokens_req(m, seqs[m]))
            self.assertEqual(r.cached_inputs, 0)
            together = vectors(r)
            self.assertEqual(len(together), len(seqs[m]))
            for k, (a, b) in enumerate(zip(together, alone[m])):
                self.assertClose(a, b, 1e-5, f"{m} input {k}")

    def test_truncate(self):
        d, st = self.start()
        info = st.ShowModel(pb.ShowModelRequest(model="bert-tiny"))
        limit = info.ctx_size
        self.assertEqual(limit, 512)  # the model's trained context (position_embd rows)
        long = [101] + [1996] * (limit + 40) + [102]
        e = self.assertCode(lambda: st.Embed(tokens_req("bert-tiny", [[101, 102], long])),
                            C.INVALID_ARGUMENT, "token_inputs[1]")
        self.assertIn(str(len(long)) + " tokens", e.details())
        r = st.Embed(tokens_req("bert-tiny", [[101, 102], long], truncate=True))
        self.assertEqual(r.truncated_inputs, 1)
        self.assertEqual(r.prompt_tokens, 2 + limit)
        cut = vectors(st.Embed(tokens_req("bert-tiny", [long[:limit]])))[0]
        self.assertClose(vectors(r)[1], cut, 1e-6, "token input cut to its first tokens")
        # a text keeps its closing [SEP] when cut
        text = " ".join(["the"] * (limit + 10))
        self.assertCode(lambda: st.Embed(pb.EmbedRequest(model="bert-tiny", inputs=[text])),
                        C.INVALID_ARGUMENT, "inputs[0]")
        r = st.Embed(pb.EmbedRequest(model="bert-tiny", inputs=[text], truncate=True))
        want = vectors(st.Embed(tokens_req("bert-tiny", [[101] + [1996] * (limit - 2) + [102]])))
        self.assertClose(vectors(r)[0], want[0], 1e-6, "text cut with its [SEP]")

    def test_dimensions(self):
        d, st = self.start()
        seq = read_ids(os.path.join(EMBED, "nomic-bert-tiny-I1.txt"))
        raw = vectors(st.Embed(tokens_req("nomic-bert-tiny", seq, raw=True)))[0]
        v = vectors(st.Embed(tokens_req("nomic-bert-tiny", seq, dimensions=16)))[0]
        n = sum(x * x for x in raw[:16]) ** 0.5
        self.assertClose(v, [x / n for x in raw[:16]], 1e-6, "matryoshka")
        self.assertCode(lambda: st.Embed(tokens_req("nomic-bert-tiny", seq, dimensions=65)),
                        C.INVALID_ARGUMENT, "dimensions")

    def test_cache(self):
        d, st = self.start()
        req = pb.EmbedRequest(model="qwen3-embed-tiny", inputs=["a cached sentence", "another"])
        first = st.Embed(req)
        self.assertEqual(first.cached_inputs, 0)
        again = st.Embed(req)
        self.assertEqual(again.cached_inputs, 2)
        self.assertEqual(vectors(first), vectors(again))
        # a normalize/dimensions variant of the same input is a hit too
        part = st.Embed(pb.EmbedRequest(model="qwen3-embed-tiny", inputs=["another", "new one"],
                                         dimensions=8))
        self.assertEqual(part.cached_inputs, 1)
        text = st.Metrics(pb.MetricsRequest()).text
        self.assertEqual(metric(text, "warmd_embed_cache_hits_total"), 3)
        self.assertEqual(metric(text, "warmd_embed_cache_misses_total"), 3)
        self.assertEqual(metric(text, "warmd_embed_cache_entries"), 3)

    def test_refusals(self):
        d, st = self.start(stories=True)
        self.assertCode(lambda: st.Embed(pb.EmbedRequest(model="stories", inputs=["x"])),
                        C.FAILED_PRECONDITION, "model 'stories' does not produce embeddings")
        self.assertCode(lambda: st.Generate(pb.GenerateRequest(model="bert-tiny", prompt="x")),
                        C.FAILED_PRECONDITION, "model 'bert-tiny' is an embedding model")
        self.assertCode(lambda: st.Chat(pb.ChatRequest(
            model="bert-tiny", messages=[pb.ChatMessage(role="user", content="x")])),
            C.FAILED_PRECONDITION, "model 'bert-tiny' is an embedding model")
        self.assertCode(lambda: st.Embed(pb.EmbedRequest(model="bert-tiny")),
                        C.INVALID_ARGUMENT, "exactly one of inputs and token_inputs")
        self.assertCode(lambda: st.Embed(pb.EmbedRequest(model="bert-tiny", inputs=[""])),
                        C.INVALID_ARGUMENT, "inputs[0]: empty")
        self.assertCode(lambda: st.Embed(tokens_req("bert-tiny", [[5000]])),
                        C.INVALID_ARGUMENT, "out of range")
        self.assertCode(lambda: st.Embed(pb.EmbedRequest(model="bert-tiny",
                                                         inputs=["x"] * 2049)),
                        C.INVALID_ARGUMENT, "at most 2048")

    def test_embed_while_generating(self):
        # Each decode step of the chat model sleeps 50 ms (the daemon's test hook), so 400
        # tokens take 20 s; the Embed must answer while the stream is still running.
        d, st = self.start(stories=True, env={"WARM_TEST_STALL_USEC": "50000"})
        st.Embed(pb.EmbedRequest(model="nomic-bert-tiny", inputs=["warm up"]))
        stream = st.Generate(pb.GenerateRequest(model="stories", prompt="Once upon a time",
                                                max_tokens=400,
                                                sampling=pb.Sampling(temperature=0)))
        events = iter(stream)
        while not next(events).HasField("token"):
            pass  # the stream is generating now
        r = st.Embed(pb.EmbedRequest(model="nomic-bert-tiny", inputs=["while it streams"]))
        self.assertEqual(len(r.embeddings), 1)
        ev = next(events)  # the stream did not end before the Embed answered
        self.assertTrue(ev.HasField("token"), ev)
        names = {m.name: m for m in st.ListModels(pb.ListModelsRequest()).models}
        self.assertTrue(names["stories"].loaded and names["nomic-bert-tiny"].loaded)
        stream.cancel()

    def test_clients(self):
        # warmctl embed --json and the Python client give the RPC's vectors
        d, st = self.start()
        want = vectors(st.Embed(pb.EmbedRequest(model="bert-tiny", inputs=[I1_TEXT, "dog"])))
        p = subprocess.run([os.path.join(BIN, "warmctl"), "--socket", d.socket, "embed",
                            "bert-tiny", I1_TEXT, "dog", "--json"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = json.loads(p.stdout)
        self.assertEqual(out["embeddings"], want)
        self.assertEqual(out["cached_inputs"], 2)
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "client", "python"))
        from warm_client import Client
        with Client(d.socket) as c:
            self.assertEqual(c.embed("bert-tiny", [I1_TEXT, "dog"]), want)
            self.assertEqual(len(c.embed("bert-tiny", "dog", dimensions=8)[0]), 8)

    def test_show(self):
        d, st = self.start(stories=True)
        s = st.ShowModel(pb.ShowModelRequest(model="gemma-embed-tiny"))
        self.assertTrue(s.embedding)
        self.assertEqual(s.pooling, "mean")
        self.assertEqual(s.embedding_length, 64)
        s = st.ShowModel(pb.ShowModelRequest(model="stories"))
        self.assertFalse(s.embedding)
        self.assertEqual(s.embedding_length, 0)


if __name__ == "__main__":
    main()
