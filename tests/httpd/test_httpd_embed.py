"""warm-httpd: the embedding endpoints against a real warmd and a real warm-httpd, with
nomic-bert-tiny (../shared/models/embed; skipped without it) and the chatml model
warm-mkmodel makes. Through the official ollama npm package: embed (one text, a list,
dimensions), embeddings (legacy, not normalized), show's capabilities ["embedding"] and
["completion", ...], the Open WebUI flow (embed documents and a query, the closest by
cosine, then chat with it) with both models resident (ps), and chat on an embedding model
refused naming it. Through the official openai npm package: embeddings.create with float,
the SDK's default (base64, decoded by the SDK) and explicit base64, token ids, dimensions
and usage. Through LangChain's OllamaEmbeddings (@langchain/ollama): embedDocuments and
embedQuery. Every vector equals the Embed RPC's for the same input. And by curl: a text
model on each endpoint is a 400 naming it, an over-long input without truncate a 400.

Needs root (setpriv); npm for the SDK cases (skipped with a message without it)."""

import base64
import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_httpd import ALICE, HttpdHarness  # noqa: E402
from warmd_harness import SHARED, main, pb  # noqa: E402

EMBED_MODEL = os.path.join(SHARED, "embed", "nomic-bert-tiny.gguf") if SHARED else ""
DOCS = ["The cat sat on the mat and purred.",
        "Rust and C compile to native code.",
        "Bread needs flour, water, salt and yeast."]
QUERY = "what does bread need"


def add_embed(d):
    shutil.copy(EMBED_MODEL, os.path.join(d.models, "nomic.gguf"))


class HttpdEmbedTest(HttpdHarness):
    def setUp(self):
        super().setUp()
        if not os.path.exists(EMBED_MODEL):
            self.skipTest("embed/nomic-bert-tiny.gguf not found under WARM_SHARED_MODELS")

    def rpc(self, inputs=None, tokens=None, **kw):
        st = self.d.stub()
        if tokens is not None:
            req = pb.EmbedRequest(model="nomic", token_inputs=[pb.TokenList(tokens=t) for t in tokens], **kw)
        else:
            req = pb.EmbedRequest(model="nomic", inputs=inputs, **kw)
        return [list(v.values) for v in st.Embed(req).embeddings]

    def assertVecs(self, got, want, what):
        self.assertEqual(len(got), len(want), what)
        for g, w in zip(got, want):
            self.assertEqual(len(g), len(w), what)
            self.assertLessEqual(max(abs(a - b) for a, b in zip(g, w)), 1e-6, what)

    def test_curl(self):
        self.start(prepare=add_embed)
        st, text = self.curl("/api/embed", {"model": "nomic", "input": DOCS}, uid=ALICE)
        self.assertEqual(st, 200, text)
        doc = json.loads(text)
        self.assertEqual(set(doc), {"model", "embeddings", "total_duration", "load_duration",
                                    "prompt_eval_count"})
        self.assertVecs(doc["embeddings"], self.rpc(DOCS), "/api/embed")
        self.assertGreater(doc["prompt_eval_count"], len(DOCS))
        st, text = self.curl("/api/embed", {"model": "nomic", "input": []}, uid=ALICE)
        self.assertEqual((st, json.loads(text)["embeddings"]), (200, []))
        long = " ".join(["word"] * 3000)
        st, text = self.curl("/v1/embeddings", {"model": "nomic", "input": long}, uid=ALICE)
        self.assertEqual(st, 400, text)
        self.assertIn("inputs[0]: 3002 tokens", json.loads(text)["error"]["message"])
        st, text = self.curl("/api/embed", {"model": "nomic", "input": long, "truncate": False},
                             uid=ALICE)
        self.assertEqual(st, 400, text)
        st, text = self.curl("/api/embed", {"model": "nomic", "input": long}, uid=ALICE)
        self.assertEqual(st, 200, text)  # Ollama truncates by default
        for path, body, api in [("/api/embed", {"model": "chatty", "input": "x"}, "ollama"),
                                ("/api/embeddings", {"model": "chatty", "prompt": "x"}, "ollama"),
                                ("/v1/embeddings", {"model": "chatty", "input": "x"}, "openai")]:
            st, text = self.curl(path, body, uid=ALICE)
            self.assertEqual(st, 400, (path, text))
            err = json.loads(text)["error"]
            self.assertIn("model 'chatty' does not produce embeddings",
                          err if api == "ollama" else err["message"])
        for path, body in [("/api/chat", {"model": "nomic", "stream": False,
                                          "messages": [{"role": "user", "content": "x"}]}),
                           ("/v1/chat/completions", {"model": "nomic",
                                                     "messages": [{"role": "user", "content": "x"}]}),
                           ("/api/generate", {"model": "nomic", "prompt": "x", "stream": False})]:
            st, text = self.curl(path, body, uid=ALICE)
            self.assertEqual(st, 400, (path, text))
            self.assertIn("model 'nomic' is an embedding model", text)

    def test_ollama_sdk(self):
        self.start(prepare=add_embed)
        out = self.node("embed_ollama_client.mjs", {"host": self.h.base, "model": "nomic",
                                                    "chat_model": "chatty", "docs": DOCS,
                                                    "query": QUERY})
        want = self.rpc(DOCS)
        self.assertVecs(out["one"]["embeddings"], want[:1], "embed one")
        self.assertVecs(out["many"]["embeddings"], want, "embed many")
        self.assertVecs(out["dims"]["embeddings"], self.rpc(DOCS[:1], dimensions=16), "dims")
        self.assertEqual(len(out["dims"]["embeddings"][0]), 16)
        self.assertVecs([out["legacy"]["embedding"]], self.rpc(DOCS[:1], raw=True), "legacy")
        self.assertEqual(out["show"], ["embedding"])
        self.assertIn("completion", out["chat_show"])
        self.assertNotIn("embedding", out["chat_show"])
        q = self.rpc([QUERY])[0]
        best = max(range(len(DOCS)), key=lambda i: sum(a * b for a, b in zip(want[i], q)))
        self.assertEqual(out["best"], best)
        self.assertTrue(out["chat"]["done"])
        self.assertEqual(out["ps"], ["chatty", "nomic"])
        self.assertEqual(out["chat_refused"]["status"], 400)
        self.assertIn("model 'nomic' is an embedding model", out["chat_refused"]["message"])

    def test_langchain_ollama_embeddings(self):
        """LangChain's OllamaEmbeddings (what LangChain RAG apps index with) gets the
        RPC's vectors, of the model's width."""
        self.start(prepare=add_embed)
        out = self.node("embed_langchain_client.mjs", {"host": self.h.base, "model": "nomic",
                                                       "docs": DOCS, "query": QUERY})
        want = self.rpc(DOCS)
        self.assertEqual(len(out["docs"]), len(DOCS))
        self.assertEqual(len(out["docs"][0]), len(want[0]))
        self.assertVecs(out["docs"], want, "embedDocuments")
        self.assertVecs([out["query"]], self.rpc([QUERY]), "embedQuery")

    def test_openai_sdk(self):
        self.start(prepare=add_embed)
        toks = [list(self.d.stub().Tokenize(pb.TokenizeRequest(
            model="nomic", text=t, add_special=True)).tokens) for t in DOCS[:2]]
        out = self.node("embed_openai_client.mjs", {"base": self.h.base + "/v1", "model": "nomic",
                                                    "docs": DOCS, "tokens": toks})
        want = self.rpc(DOCS)
        for k in ("float", "default"):
            self.assertVecs(out[k]["vecs"], want, k)
            self.assertEqual(out[k]["index"], [0, 1, 2], k)
            self.assertEqual(out[k]["object"], "list", k)
            self.assertEqual(out[k]["model"], "nomic", k)
            self.assertEqual(out[k]["usage"]["prompt_tokens"], out[k]["usage"]["total_tokens"])
            self.assertGreater(out[k]["usage"]["prompt_tokens"], 3)
        raw = base64.b64decode(out["base64"])
        self.assertEqual(len(raw), 4 * 64)
        self.assertEqual(list(struct.unpack("<64f", raw)), [struct.unpack("<f", struct.pack("<f", x))[0] for x in want[0]])
        self.assertVecs(out["tokens"]["vecs"], self.rpc(tokens=toks), "tokens")
        self.assertVecs(out["tokens"]["vecs"], want[:2], "tokens equal texts")
        self.assertVecs(out["dims"]["vecs"], self.rpc(DOCS[:1], dimensions=8), "dimensions")


if __name__ == "__main__":
    main()
