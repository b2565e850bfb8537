"""client/python: the warm_client package and its streaming example against a real
warmd; the example's text equals warmctl's for the same greedy request."""

import json
import os
import subprocess
import sys

from client_harness import MODEL, ClientTest, main, pb

CLIENT_PY = os.environ.get("WARM_CLIENT_PYTHON", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python"))
sys.path.insert(0, CLIENT_PY)
import warm_client  # noqa: E402
from warm_client import Client, WarmError  # noqa: E402

EXAMPLE = os.path.join(CLIENT_PY, "examples", "stream.py")


class PythonClient(ClientTest):
    def test_example_streams(self):
        d = self.start()
        env = dict(os.environ, PYTHONPATH=CLIENT_PY)
        p = subprocess.run([sys.executable, EXAMPLE, "--socket", d.socket, MODEL,
                            "Once upon a time", "-n", "16", "-t", "0"], capture_output=True,
                           text=True, env=env, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("16 generated", p.stderr)
        want = self.ctl("run", MODEL, "Once upon a time", "-n", "16", "--greedy").out
        self.assertEqual(p.stdout, want)
        # Through WARM_SOCKET, and the error of a daemon that is not there.
        env["WARM_SOCKET"] = os.path.join(self.tmp, "absent.sock")
        p = subprocess.run([sys.executable, EXAMPLE, MODEL, "x"], capture_output=True,
                           text=True, env=env, timeout=120)
        self.assertEqual(p.returncode, 1)
        self.assertIn("warmd is not running", p.stderr)

    def test_package(self):
        d = self.start()
        with Client(d.socket) as c:
            self.assertEqual(c.info().api_version, "warm.v1")
            self.assertEqual([m.name for m in c.models()], [MODEL])
            ids = c.tokenize(MODEL, "Once upon a time", add_special=True)
            self.assertEqual(c.detokenize(MODEL, ids, skip_special=True).decode().strip(),
                             "Once upon a time")
            s = c.generate(MODEL, "Once upon a time", max_tokens=8, temperature=0)
            text = s.text()
            self.assertEqual(s.summary.generated_tokens, 8)
            self.assertEqual("".join(t for _, t in s.tokens), text)
            # Cancel mid-stream.
            s = c.generate(MODEL, "Once", max_tokens=2000, temperature=0)
            n = 0
            with self.assertRaises(WarmError) as cm:
                for _ in s:
                    n += 1
                    if n == 3:
                        s.cancel()
            self.assertEqual(cm.exception.code.name, "CANCELLED")
            with self.assertRaises(WarmError) as cm:
                c.generate("nope", "x").text()
            self.assertEqual(cm.exception.code.name, "NOT_FOUND")
            self.assertIn("warmd_", c.metrics())
            try:
                s = c.chat(MODEL, [("system", "Stories."), {"role": "user", "content": "Hi"}],
                           max_tokens=4, temperature=0)
                s.text()
                self.assertLessEqual(s.summary.generated_tokens, 4)
            except WarmError as e:
                # stories260K has no chat template: FAILED_PRECONDITION from a daemon with Chat
                self.assertIn(e.code.name, ("UNIMPLEMENTED", "FAILED_PRECONDITION"))
                if e.code.name == "FAILED_PRECONDITION":
                    self.assertIn("no supported chat template", str(e))
            self.assertTrue(c.load(MODEL, keep_alive_s=30).model.loaded)
            self.assertTrue(c.unload(MODEL))
            try:
                c.cache_stats()
            except WarmError as e:
                self.assertEqual(e.code.name, "UNIMPLEMENTED")
        with self.assertRaises(WarmError) as cm:
            Client(os.path.join(self.tmp, "absent.sock"))
        self.assertEqual(cm.exception.code, "NOT_RUNNING")
        self.assertTrue(warm_client.DEFAULT_SOCKET.startswith("/run/"))

    def test_json_schema_and_grammar(self):
        d = self.start()
        schema = {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 10},
            "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 2}},
            "required": ["name", "pets"], "additionalProperties": False}
        with Client(d.socket) as c:
            for seed in (0, 1, 2):
                kw = dict(temperature=0) if seed == 0 else dict(temperature=1.0, seed=seed)
                # a dict, or the same schema as text
                s = c.generate(MODEL, "Once upon a time", max_tokens=200, json_schema=schema, **kw)
                text = s.text()
                v = json.loads(text)
                self.assertEqual(s.summary.stop_reason, pb.STOP_REASON_EOS)
                self.assertEqual(sorted(v), ["name", "pets"])
                self.assertLessEqual(len(v["name"]), 10)
                self.assertTrue(set(v["pets"]) <= {"cat", "dog"} and len(v["pets"]) <= 2, v)
                again = c.generate(MODEL, "Once upon a time", max_tokens=200,
                                   json_schema=json.dumps(schema), **kw).text()
                self.assertEqual(again, text)
            v = json.loads(c.generate(MODEL, "Once", max_tokens=200, temperature=0,
                                      json_schema=warm_client.JSON_OBJECT).text())
            self.assertIsInstance(v, dict)
            self.assertIn(c.generate(MODEL, "Once", max_tokens=5, temperature=1.0, seed=3,
                                     grammar='root ::= "yes" | "no"').text(), ("yes", "no"))
            with self.assertRaises(WarmError) as cm:
                c.generate(MODEL, "Once", json_schema={"type": "string", "format": "email",
                                                       "minLength": 1, "pattern": "@"}).text()
            self.assertEqual(cm.exception.code.name, "INVALID_ARGUMENT")
            self.assertIn("unsupported keyword 'pattern'", str(cm.exception))
            with self.assertRaises(ValueError):
                c.generate(MODEL, "Once", json_schema={}, grammar="root ::= \"x\"")


if __name__ == "__main__":
    main()
