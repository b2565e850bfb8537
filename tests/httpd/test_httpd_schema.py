"""warm-httpd: constrained JSON output (the issue "Agents ... constrained JSON output")
against a real warmd and a real warm-httpd (HttpdHarness). Through the official openai
package: response_format json_schema (strict) and json_object on /v1/chat/completions, whole,
streamed and with the SDK's parse(), and json_schema on /v1/completions; through the
official ollama package: format as a schema on /api/generate and /api/chat, whole and
streamed, and format "json". Greedy and sampled with several seeds; every reply parses
(JSON.parse in the SDK's process) and validates against the schema (here); greedy replies
equal warmctl's for the same schema; an unsupported keyword is a 400 naming it in each
API's error shape.

Needs root (setpriv); npm for the SDK cases (skipped with a message without it)."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_httpd import ALICE, PROMPT, HttpdHarness  # noqa: E402
from warmd_harness import main  # noqa: E402
from test_json_schema import PERSON, check  # noqa: E402  (tests/e2e)

BAD = {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}
SEEDS = [0, 1, 2, 3]  # 0: greedy


class HttpdSchemaTest(HttpdHarness):
    def assertValid(self, value, what):
        self.assertEqual(check(PERSON, value), [], (what, value))

    def warmctl_greedy(self, *args):
        """warmctl's greedy text under PERSON (run or chat, --json)."""
        path = os.path.join(self.tmp, "person.json")
        with open(path, "w") as f:
            json.dump(PERSON, f)
        ev = self.ctl(*args, "--json-schema", path, "--greedy", "-n", "300", "--json",
                      stdin="Tell me about a person.\n" if args[0] == "chat" else None)
        self.assertEqual(ev[-1]["summary"]["stop_reason"], "eos")
        return "".join(e["token"]["text"] for e in ev if "token" in e)

    def test_openai_sdk_response_format(self):
        self.start()
        want_chat = self.warmctl_greedy("chat", "chatty")
        want_run = self.warmctl_greedy("run", "stories", PROMPT)
        out = self.node("schema_openai_client.mjs", {
            "base": self.h.base + "/v1", "model": "stories", "chat_model": "chatty",
            "prompt": PROMPT, "schema": PERSON, "bad_schema": BAD, "seeds": SEEDS})
        for k in ("chat", "chat_stream"):
            self.assertEqual([r["seed"] for r in out[k]], SEEDS)
            for r in out[k]:
                self.assertValid(r["value"], (k, r["seed"]))
                self.assertEqual(r["finish"], "stop", (k, r))
            self.assertEqual(out[k][0]["text"], want_chat, k)
        # seeded replies are the same whole or streamed
        self.assertEqual([r["text"] for r in out["chat"]], [r["text"] for r in out["chat_stream"]])
        self.assertEqual(out["parsed"], json.loads(want_chat))
        self.assertIsInstance(out["json_object"]["value"], dict)
        self.assertEqual(out["json_object"]["finish"], "stop")
        self.assertValid(out["completion"]["value"], "completion")
        self.assertEqual(out["completion"]["text"], want_run)
        r = out["refused"]
        self.assertEqual(r["status"], 400, r)
        self.assertEqual(r["param"], "response_format.json_schema.schema", r)
        self.assertEqual(r["type"], "invalid_request_error", r)
        self.assertIn("unsupported keyword 'pattern' at /properties/zip", r["message"])

    def test_ollama_sdk_format(self):
        self.start()
        want_run = self.warmctl_greedy("run", "stories", PROMPT)
        want_chat = self.warmctl_greedy("chat", "chatty")
        out = self.node("schema_ollama_client.mjs", {
            "host": self.h.base, "model": "stories", "chat_model": "chatty", "prompt": PROMPT,
            "schema": PERSON, "bad_schema": BAD, "seeds": SEEDS})
        for k in ("generate", "generate_stream", "chat", "chat_stream"):
            self.assertEqual([r["seed"] for r in out[k]], SEEDS)
            for r in out[k]:
                self.assertValid(r["value"], (k, r["seed"]))
                self.assertEqual(r["reason"], "stop", (k, r))
        self.assertEqual(out["generate"][0]["text"], want_run)
        self.assertEqual(out["generate_stream"][0]["text"], want_run)
        self.assertEqual(out["chat"][0]["text"], want_chat)
        self.assertEqual(out["chat_stream"][0]["text"], want_chat)
        for a, b in (("generate", "generate_stream"), ("chat", "chat_stream")):
            self.assertEqual([r["text"] for r in out[a]], [r["text"] for r in out[b]])
        self.assertIsInstance(out["json"]["value"], dict)
        self.assertEqual(out["json"]["reason"], "stop")
        r = out["refused"]
        self.assertEqual(r["status"], 400, r)
        self.assertIn("format: unsupported keyword 'pattern' at /properties/zip", r["message"])

    def test_curl_shapes(self):
        """The forms the SDKs do not send: refusals by name, text and absent formats."""
        self.start()
        gen = {"model": "stories", "prompt": PROMPT, "stream": False,
               "options": {"temperature": 0, "num_predict": 300}}
        for fmt in ("yaml", 3, ["json"]):
            doc = self.jcurl("/api/generate", dict(gen, format=fmt), status=400, uid=ALICE)
            self.assertIn("'format' must be \"json\" or a JSON Schema object", doc["error"])
        # "" and null: free text, as Ollama
        for fmt in ("", None):
            doc = self.jcurl("/api/generate", dict(gen, format=fmt,
                                                   options={"temperature": 0, "num_predict": 8}),
                             uid=ALICE)
            self.assertEqual(doc["done_reason"], "length")
        comp = {"model": "stories", "prompt": PROMPT, "max_tokens": 300, "temperature": 0}
        for rf, param in [({"type": "xml"}, "response_format.type"),
                          ("json", "response_format"),
                          ({"type": "json_schema"}, "response_format.json_schema"),
                          ({"type": "json_schema", "json_schema": {"name": "x", "schema": 5}},
                           "response_format.json_schema.schema"),
                          ({"type": "json_schema", "json_schema": {"name": "x", "schema": BAD}},
                           "response_format.json_schema.schema")]:
            doc = self.jcurl("/v1/completions", dict(comp, response_format=rf), status=400,
                             uid=ALICE)
            self.assertEqual(doc["error"]["param"], param, doc)
            self.assertIn(param, doc["error"]["message"])
        doc = self.jcurl("/v1/completions", dict(comp, response_format={"type": "text"},
                                                 max_tokens=8), uid=ALICE)
        self.assertEqual(doc["choices"][0]["finish_reason"], "length")
        # json_schema without a schema: one object
        doc = self.jcurl("/v1/completions", dict(comp, response_format={
            "type": "json_schema", "json_schema": {"name": "x"}}), uid=ALICE)
        self.assertIsInstance(json.loads(doc["choices"][0]["text"]), dict)


if __name__ == "__main__":
    main()
