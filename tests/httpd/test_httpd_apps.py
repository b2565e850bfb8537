"""warm-httpd: what apps read and send (the issue "Agents and coding tools work against
warmd", item 4), against a real warmd and a real warm-httpd (HttpdHarness): /api/show's
capabilities, parameters, template and model_info (a copy of stories260K whose vocabulary
names FIM tokens, "coder", has "insert"); options.num_ctx bounding prompt and output;
keep_alive in Ollama's forms, for one request only; Open WebUI's load and unload with an
empty prompt; /api/generate's suffix (fill in the middle from the vocabulary's FIM tokens,
compared with warmd's own greedy output for the same token ids) and raw; OpenAI's
stream_options.include_usage, seed, stop and max_completion_tokens through the official
openai package; every error in the shape its API's clients parse (the official ollama
package's message included), and the embedding endpoints answering 400 naming a text model.

Needs root (setpriv); npm for the SDK cases (skipped with a message without it)."""

import json
import os
import shutil
import struct
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_httpd import ALICE, PROMPT, STORIES, WAIT, HttpdHarness  # noqa: E402
from warmd_harness import main, pb  # noqa: E402

FIM = (100, 101, 102)  # ids the coder copy names as FIM prefix, suffix and middle
GREEDY = {"temperature": 0}


def gguf_with(src, dst, extra):
    """Copies the GGUF file src to dst with more uint32 metadata pairs (extra: key -> value)."""
    with open(src, "rb") as f:
        b = f.read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", b, 0)
    assert magic == b"GGUF" and version == 3, (magic, version)
    pos = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    alignment = 32

    def string(p):
        n, = struct.unpack_from("<Q", b, p)
        return b[p + 8:p + 8 + n], p + 8 + n

    def value(p, t):
        if t == 8:
            return string(p)
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, p)
            p += 12
            v = []
            for _ in range(n):
                x, p = value(p, et)
                v.append(x)
            return v, p
        return struct.unpack_from({1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[sizes[t]], b, p)[0], \
            p + sizes[t]

    for _ in range(n_kv):
        key, pos = string(pos)
        t, = struct.unpack_from("<I", b, pos)
        v, pos = value(pos + 4, t)
        if key == b"general.alignment":
            alignment = v
    kv_end = pos
    for _ in range(n_tensors):
        _, pos = string(pos)
        n_dims, = struct.unpack_from("<I", b, pos)
        pos += 4 + 8 * n_dims + 4 + 8
    data = (pos + alignment - 1) // alignment * alignment
    add = b"".join(struct.pack("<Q", len(k)) + k.encode() + struct.pack("<II", 4, v)
                   for k, v in extra.items())
    head = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv + len(extra)) + b[24:kv_end] + add \
        + b[kv_end:pos]
    with open(dst, "wb") as f:
        f.write(head + b"\0" * (-len(head) % alignment) + b[data:])


def add_coder(d):
    gguf_with(STORIES, os.path.join(d.models, "coder.gguf"),
              {"tokenizer.ggml.fim_pre_token_id": FIM[0],
               "tokenizer.ggml.fim_suf_token_id": FIM[1],
               "tokenizer.ggml.fim_mid_token_id": FIM[2]})


class HttpdAppsTest(HttpdHarness):
    def gen(self, body, status=200, uid=ALICE):
        return self.jcurl("/api/generate", dict({"stream": False}, **body), status=status,
                          uid=uid)

    def loaded(self):
        return sorted(m["name"] for m in self.jcurl("/api/ps")["models"])

    def wait_loaded(self, want):
        end = time.monotonic() + WAIT
        while time.monotonic() < end and self.loaded() != want:
            time.sleep(0.05)
        self.assertEqual(self.loaded(), want)

    def left(self, name="stories"):
        """Seconds the longest lease on the model still holds (warmd's ListModels)."""
        ms = self.d.stub().ListModels(pb.ListModelsRequest()).models
        return {m.name: m for m in ms}[name].keep_alive_left_usec / 1e6

    def greedy_ids(self, model, ids, n):
        """warmd's own greedy text for token ids (no template, no BOS added)."""
        text = ""
        for ev in self.d.stub().Generate(pb.GenerateRequest(
                model=model, tokens=ids, max_tokens=n, sampling=pb.Sampling(temperature=0))):
            if ev.HasField("token"):
                text += ev.token.text
        return text

    def tokenize(self, model, text, add_special=False):
        return list(self.d.stub().Tokenize(pb.TokenizeRequest(
            model=model, text=text, add_special=add_special)).tokens)

    # ---- /api/show ----

    def test_show_tells_capabilities_parameters_and_model_info(self):
        self.start(prepare=add_coder)
        shown = {m: self.jcurl("/api/show", {"model": m}) for m in ("stories", "coder", "chatty")}
        self.assertEqual(shown["stories"]["capabilities"], ["completion"])
        self.assertEqual(shown["coder"]["capabilities"], ["completion", "insert"])
        self.assertEqual(shown["chatty"]["capabilities"], ["completion", "tools"])
        ctx = self.d.stub().ShowModel(pb.ShowModelRequest(model="chatty")).ctx_size
        lines = shown["chatty"]["parameters"].splitlines()
        self.assertEqual(lines[0].split(), ["num_ctx", str(ctx)])
        self.assertEqual(lines[0].index(str(ctx)), 31)  # Ollama's 30-column names
        self.assertIn('stop                           "<|im_end|>"', lines)
        self.assertIn("<|im_start|>", shown["chatty"]["template"])
        self.assertEqual(shown["stories"]["template"], "{{ .Prompt }}")
        info = shown["stories"]["model_info"]
        self.assertEqual(info["general.architecture"], "llama")
        self.assertEqual(info["llama.context_length"], 2048)  # what the file says
        self.assertEqual(info["llama.embedding_length"], 64)
        self.assertEqual(info["llama.block_count"], 5)
        self.assertIsNone(info["tokenizer.ggml.tokens"])  # arrays: null, as Ollama
        self.assertEqual(shown["coder"]["model_info"]["tokenizer.ggml.fim_mid_token_id"], FIM[2])
        self.assertEqual(shown["stories"]["details"]["family"], "llama")
        self.assertTrue(shown["stories"]["details"]["parameter_size"].endswith("K"))
        self.assertEqual(self.jcurl("/api/show", {"model": "stories:latest"})["capabilities"],
                         ["completion"])
        doc = self.jcurl("/api/show", {"model": "nosuch"}, status=404)
        self.assertIsInstance(doc["error"], str)
        # show reads the file: it loads nothing
        self.assertEqual(self.loaded(), [])

    # ---- options.num_ctx, num_predict ----

    def test_num_ctx_bounds_prompt_and_output(self):
        self.start()
        base = {"model": "stories", "prompt": PROMPT, "raw": True, "options": dict(GREEDY)}
        full = self.gen(dict(base, options=dict(GREEDY, num_predict=40)))
        self.assertEqual(full["eval_count"], 40)
        n_prompt = full["prompt_eval_count"]
        # num_ctx 6 past the prompt: 6 tokens fit, and the answer says "length"
        r = self.gen(dict(base, options=dict(GREEDY, num_predict=40, num_ctx=n_prompt + 6)))
        self.assertEqual(r["eval_count"], 6)
        self.assertEqual(r["done_reason"], "length")
        self.assertTrue(full["response"].startswith(r["response"]), (full, r))
        # the same streamed
        st, text = self.curl("/api/generate", dict(base, options=dict(
            GREEDY, num_predict=40, num_ctx=n_prompt + 6)), uid=ALICE)
        last = json.loads(text.splitlines()[-1])
        self.assertEqual((st, last["eval_count"], last["done_reason"]), (200, 6, "length"))
        # a prompt that fills num_ctx: refused, naming num_ctx
        doc = self.gen(dict(base, options=dict(GREEDY, num_ctx=n_prompt)), status=400)
        self.assertIn("num_ctx", doc["error"])
        # above the model's context: the model's (Ollama clamps too), not an error
        r = self.gen(dict(base, options=dict(GREEDY, num_predict=40, num_ctx=1 << 20)))
        self.assertEqual(r["eval_count"], 40)
        self.assertEqual(r["response"], full["response"])
        # chat too
        chat = {"model": "chatty", "messages": [{"role": "user", "content": "Hi"}],
                "stream": False}
        c = self.jcurl("/api/chat", dict(chat, options=dict(GREEDY, num_predict=30)), uid=ALICE)
        c6 = self.jcurl("/api/chat", dict(chat, options=dict(
            GREEDY, num_predict=30, num_ctx=c["prompt_eval_count"] + 3)), uid=ALICE)
        self.assertEqual(c6["eval_count"], min(3, c["eval_count"]))

    # ---- keep_alive ----

    def test_keep_alive_forms_hold_for_their_request_only(self):
        self.start(config="max_keep_alive = 10h\n")
        body = {"model": "stories", "prompt": PROMPT, "raw": True,
                "options": {"num_predict": 1}}
        cases = [("1h30m", 5400), ("90s", 90), (90, 90), ("10s", 10), (150.5, 150.5),
                 (-1, 36000), ("-1m", 36000)]
        for ka, want in cases:
            self.gen(dict(body, keep_alive=ka))
            self.assertAlmostEqual(self.left(), want, delta=max(2, min(want / 10, 30)), msg=ka)
            # the next request sends none: warm-httpd's default (5m), not ka
            self.gen(body)
            self.assertAlmostEqual(self.left(), 300, delta=30, msg=f"after {ka!r}")
        # OpenAI's requests have no keep_alive: the default too
        self.gen(dict(body, keep_alive="2h"))
        self.jcurl("/v1/completions", {"model": "stories", "prompt": PROMPT, "max_tokens": 1},
                   uid=ALICE)
        self.assertAlmostEqual(self.left(), 300, delta=30)
        for bad in ("5 minutes", "1x", True, "-"):
            doc = self.gen(dict(body, keep_alive=bad), status=400)
            self.assertIn("keep_alive", doc["error"])

    # ---- load and unload with an empty prompt (Open WebUI) ----

    def test_empty_prompt_loads_and_keep_alive_0_unloads(self):
        self.start()
        self.assertEqual(self.loaded(), [])
        r = self.gen({"model": "stories"})
        self.assertEqual((r["done"], r["done_reason"], r["response"]), (True, "load", ""))
        self.assertEqual(self.loaded(), ["stories"])
        r = self.gen({"model": "stories", "prompt": "", "keep_alive": 0})
        self.assertEqual((r["done"], r["done_reason"]), (True, "unload"))
        self.wait_loaded([])
        # /api/chat with no messages, streamed or not, the same
        r = self.jcurl("/api/chat", {"model": "chatty", "messages": [], "stream": False},
                       uid=ALICE)
        self.assertEqual((r["done_reason"], r["message"]["content"]), ("load", ""))
        self.assertEqual(self.loaded(), ["chatty"])
        r = self.jcurl("/api/chat", {"model": "chatty", "keep_alive": "0s"}, uid=ALICE)
        self.assertEqual(r["done_reason"], "unload")
        self.wait_loaded([])
        # unloading a model that is not loaded loads nothing; an unknown one is 404
        r = self.gen({"model": "chatty", "keep_alive": 0})
        self.assertEqual(r["done_reason"], "unload")
        time.sleep(0.3)
        self.assertEqual(self.loaded(), [])
        doc = self.gen({"model": "nosuch", "keep_alive": 0}, status=404)
        self.assertIn("nosuch", doc["error"])
        doc = self.gen({"model": "nosuch"}, status=404)
        self.assertIn("nosuch", doc["error"])
        # a load with keep_alive holds the model that long
        self.gen({"model": "stories", "keep_alive": "20m"})
        self.assertAlmostEqual(self.left(), 1200, delta=60)

    # ---- suffix and raw ----

    def test_suffix_fills_in_the_middle_and_raw_skips_the_template(self):
        self.start(prepare=add_coder)
        prefix, suffix, n = "Once upon a time there was", " and they lived happily.", 10
        ids = self.tokenize("coder", prefix, add_special=True)[:1] + [FIM[0]] \
            + self.tokenize("coder", prefix) + [FIM[1]] + self.tokenize("coder", suffix) \
            + [FIM[2]]
        self.assertEqual(ids[0], 1)  # stories' BOS, which its vocabulary adds
        want = self.greedy_ids("coder", ids, n)
        for raw in (False, True):
            r = self.gen({"model": "coder", "prompt": prefix, "suffix": suffix, "raw": raw,
                          "options": dict(GREEDY, num_predict=n)})
            self.assertEqual(r["response"], want, raw)
            self.assertEqual(r["prompt_eval_count"], len(ids))
        st, text = self.curl("/api/generate", {"model": "coder", "prompt": prefix,
                                               "suffix": suffix,
                                               "options": dict(GREEDY, num_predict=n)}, uid=ALICE)
        self.assertEqual("".join(json.loads(l).get("response", "") for l in text.splitlines()),
                         want)
        # a model without FIM tokens: 400 naming it
        doc = self.gen({"model": "stories", "prompt": prefix, "suffix": suffix}, status=400)
        self.assertIn("'stories' does not support insert", doc["error"])
        doc = self.gen({"model": "coder", "prompt": prefix, "suffix": suffix, "system": "x"},
                       status=400)
        self.assertIn("system", doc["error"])
        # raw: the prompt as it is, where the template would have wrapped it
        want_raw = self.greedy_ids("chatty", self.tokenize("chatty", "Hi", add_special=True), n)
        r = self.gen({"model": "chatty", "prompt": "Hi", "raw": True,
                      "options": dict(GREEDY, num_predict=n)})
        self.assertEqual(r["response"], want_raw)
        templated = self.gen({"model": "chatty", "prompt": "Hi",
                              "options": dict(GREEDY, num_predict=n)})
        self.assertGreater(templated["prompt_eval_count"], r["prompt_eval_count"])
        doc = self.gen({"model": "chatty", "prompt": "Hi", "raw": True, "system": "Be brief"},
                       status=400)
        self.assertIn("raw", doc["error"])

    # ---- errors and fields ----

    def test_errors_in_each_apis_shape(self):
        self.start(config="ctx_size = 256\n")
        chat = {"model": "chatty", "messages": [{"role": "user", "content": "Hi"}],
                "stream": False, "max_tokens": 2, "options": {"num_predict": 2}}
        # images in a message: the reason is text, not tool calls
        img = dict(chat, messages=[{"role": "user", "content": "Hi", "images": ["aGk="]}])
        for path in ("/api/chat", "/v1/chat/completions"):
            st, text = self.curl(path, img, uid=ALICE)
            self.assertEqual(st, 400, text)
            self.assertIn("text only", text)
            self.assertNotIn("tool calls", text)
        # /api/generate's errors are about its prompt, never "messages"
        doc = self.gen({"model": "chatty", "prompt": "word " * 2000}, status=400)
        self.assertTrue(doc["error"].startswith("prompt:"), doc)
        self.assertNotIn("messages", doc["error"])
        # Ollama's shape on /api, OpenAI's on /v1, whatever the error
        for path, body, method, status in [
                ("/api/generate", "{not json", None, 400),
                ("/api/generate", {"model": "nosuch", "prompt": "x"}, None, 404),
                ("/api/chat", {"model": "chatty", "messages": "x"}, None, 400),
                ("/api/generate", {"model": "stories", "prompt": "x",
                                   "options": {"temperature": "hot"}}, None, 400),
                ("/api/nothing", None, None, 404), ("/api/tags", None, "DELETE", 405),
                ("/api/\xff", None, None, 404)]:
            st, text = self.curl_raw(path, body, method)
            self.assertEqual(st, status, (path, text))
            doc = json.loads(text)
            self.assertEqual(list(doc), ["error"], text)
            self.assertIsInstance(doc["error"], str, text)
            self.assertTrue(doc["error"], text)
        for path, body, method, status in [
                ("/v1/chat/completions", "{not json", None, 400),
                ("/v1/completions", {"model": "nosuch", "prompt": "x"}, None, 404),
                ("/v1/chat/completions", dict(chat, temperature=9), None, 400),
                ("/v1/nothing", None, None, 404), ("/v1/models", None, "DELETE", 405),
                ("/v1/\xff", None, None, 404)]:
            st, text = self.curl_raw(path, body, method)
            self.assertEqual(st, status, (path, text))
            err = json.loads(text)["error"]
            self.assertEqual(set(err), {"message", "type", "param", "code"}, text)
            self.assertTrue(err["message"], text)
        # embeddings from a text model: 400 naming the model (501 is retried by clients)
        for path, body, api in [("/api/embed", {"model": "stories", "input": "x"}, "ollama"),
                                ("/api/embeddings", {"model": "stories", "prompt": "x"}, "ollama"),
                                ("/v1/embeddings", {"model": "stories", "input": "x"}, "openai")]:
            st, text = self.curl(path, body, uid=ALICE)
            self.assertEqual(st, 400, (path, text))
            err = json.loads(text)["error"]
            msg = err if api == "ollama" else err["message"]
            self.assertIn("model 'stories' does not produce embeddings", msg)
        # unknown fields are ignored, as Ollama and OpenAI do; think false is no request
        self.jcurl("/api/chat", dict(chat, unknown_field={"x": 1}, think=False), uid=ALICE)
        self.jcurl("/v1/chat/completions", dict(chat, unknown_field=1), uid=ALICE)

    def curl_raw(self, path, body, method):
        """(status, body) for a body that may not be JSON and a path that may not be UTF-8."""
        cmd = ["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--path-as-is"]
        if method:
            cmd += ["-X", method]
        if body is not None:
            data = body if isinstance(body, str) else json.dumps(body)
            cmd += ["-H", "Content-Type: application/json", "--data-binary", data]
        cmd.append(self.h.base + path.replace("\xff", "%ff"))
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        text, _, status = p.stdout.rpartition("\n")
        return int(status or 0), text

    # ---- the SDKs ----

    def test_sdks_see_what_apps_use(self):
        self.start(prepare=add_coder)
        out = self.node("apps_ollama_client.mjs", {"host": self.h.base, "model": "stories",
                                                   "coder": "coder"})
        self.assertEqual(out["show"]["capabilities"], ["completion", "insert"])
        self.assertEqual(out["show"]["context_length"], 2048)
        self.assertEqual(out["insert_refused"]["status"], 400)
        self.assertIn("'stories' does not support insert", out["insert_refused"]["message"])
        self.assertEqual(out["embed_refused"]["status"], 400)
        self.assertIn("'stories' does not produce embeddings", out["embed_refused"]["message"])
        self.assertEqual(out["unload"], "unload")
        out = self.node("apps_openai_client.mjs", {"base": self.h.base + "/v1",
                                                   "model": "stories", "chat_model": "chatty",
                                                   "prompt": PROMPT})
        for k in ("chat", "completion"):
            s = out[k]
            self.assertEqual(s["last_choices"], [], k)      # the usage chunk: no choices
            self.assertEqual(s["usage"]["completion_tokens"], 5, k)
            self.assertEqual(s["usage"]["total_tokens"],
                             s["usage"]["prompt_tokens"] + 5, k)
            self.assertEqual(s["n_usage_chunks"], 1, k)
        self.assertEqual(out["seed"][0], out["seed"][1])
        self.assertEqual(out["max_completion_tokens"], 3)
        self.assertEqual(out["stop"]["finish"], "stop")
        self.assertNotIn(out["stop"]["word"], out["stop"]["text"])
        self.assertEqual(out["embed_refused"]["status"], 400)
        self.assertIn("'stories' does not produce embeddings", out["embed_refused"]["message"])


if __name__ == "__main__":
    main()
