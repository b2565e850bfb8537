"""warm-httpd and the Vercel AI SDK (the issue "Agents and coding tools work against warmd",
item 6): `ai` with `ollama-ai-provider-v2` (Ollama's /api/chat) and with
`@ai-sdk/openai-compatible` (/v1/chat/completions), pinned from the npm registry into this
test's scratch directory (skipped with a message without npm), against a real warmd and a
real warm-httpd. Versions: ai 7 needs Node 22, so ai 6 (Node 18 and up) with the provider
releases written for it. Per provider: a tool round trip with generateText and streamText
(a forced call of get_time, which random weights cannot choose on their own; the SDK runs
the tool and sends its result back; the next step answers in text): the call's name and
input valid under the tool's schema, the SDK's tool result, a second step whose prompt holds
the call and its result (rendered as warmd renders the same conversation over gRPC: equal
prompt token counts), the stream's parts in order (the OpenAI provider sees the arguments
in more than one tool-input-delta); a JSON-schema answer (generateObject with a zod schema,
which the SDK validates itself); and a refused request (tools for a model without a tool
format) shown by the SDK with warm-httpd's message, not the status line's "Bad Request".

Needs root (setpriv); npm for the SDK."""

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_httpd import HERE, MKMODEL, HttpdHarness  # noqa: E402
from warmd_harness import main, pb  # noqa: E402
from test_tools import CLOCK, TOOLS, valid  # noqa: E402  (tests/e2e)

SDK = ["ai@6.0.333", "ollama-ai-provider-v2@3.6.0", "@ai-sdk/openai-compatible@2.0.92",
       "zod@4.1.12"]


class Sdk:
    """The AI SDK and its providers from the npm registry, once per run, in a scratch
    directory."""
    dir = None
    why = None

    @classmethod
    def get(cls):
        if cls.dir or cls.why:
            return cls.dir
        npm = shutil.which("npm")
        if not npm or not shutil.which("node"):
            cls.why = "npm or node not found: the AI SDK cases are skipped"
            return None
        d = tempfile.mkdtemp(prefix="warm-httpd-aisdk-")
        atexit.register(shutil.rmtree, d, True)  # the packages are fetched once per run
        os.chmod(d, 0o755)
        p = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--ignore-scripts",
                            "--prefix", d, *SDK], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise AssertionError(f"npm install {' '.join(SDK)} failed:\n{p.stderr}")
        shutil.copy(os.path.join(HERE, "aisdk_client.mjs"), d)
        cls.dir = d
        return d


def add_models(d):
    subprocess.run([MKMODEL, "--arch", "llama", "--chat-template", "gemma", "--seed", "7",
                    "-o", os.path.join(d.models, "gem.gguf")],
                   check=True, capture_output=True, timeout=120)


class HttpdAiSdkTest(HttpdHarness):
    def sdk(self, cfg):
        d = Sdk.get()
        if not d:
            self.skipTest(Sdk.why)
        p = subprocess.run(["node", os.path.join(d, "aisdk_client.mjs"), json.dumps(cfg)],
                           cwd=d, capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, HOME=d))
        self.assertEqual(p.returncode, 0, f"{p.stderr}\n{self.h.text()[-3000:]}")
        return json.loads(p.stdout)

    def grpc_prompt_tokens(self, args):
        """warmd's prompt for the user's question, the call of get_time and its result."""
        msgs = [pb.ChatMessage(role="user", content="What time is it in Paris?"),
                pb.ChatMessage(role="assistant", tool_calls=[pb.ToolCall(
                    name="get_time", arguments=json.dumps(args, separators=(",", ":")))]),
                pb.ChatMessage(role="tool", content="12:00", name="get_time")]
        for ev in self.d.stub().Chat(pb.ChatRequest(model="chatty", messages=msgs, max_tokens=1,
                                                    tools_json=json.dumps(TOOLS),
                                                    tool_choice=pb.TOOL_CHOICE_NONE)):
            if ev.HasField("summary"):
                return ev.summary.prompt_tokens
        raise AssertionError("no summary")

    def test_tool_loop_object_and_errors(self):
        self.start(prepare=add_models)
        out = self.sdk({"host": self.h.base, "base": self.h.base, "model": "chatty",
                        "no_tools_model": "gem", "tools": TOOLS})
        for prov in ("ollama", "compat"):
            r = out[prov]
            for k in ("whole", "stream"):
                what = f"{prov} {k}"
                first, second = r[k]["steps"]
                self.assertEqual([c["name"] for c in first["calls"]], ["get_time"], what)
                call = first["calls"][0]
                self.assertTrue(valid(CLOCK, call["input"]), (what, call))
                self.assertTrue(call["id"], what)
                self.assertEqual(first["finish"], "tool-calls", what)
                # the SDK ran the tool and sent its result back
                self.assertEqual(r[k]["ran"], [{"name": "get_time", "input": call["input"]}])
                self.assertEqual(first["results"], [{"name": "get_time", "id": call["id"],
                                                     "output": "12:00"}], what)
                self.assertEqual(second["calls"], [], what)
                self.assertIn(second["finish"], ("stop", "length"), what)
                # the second step's prompt: the question, the call and its result, as warmd
                # renders them
                self.assertEqual(second["input_tokens"], self.grpc_prompt_tokens(call["input"]),
                                 what)
            # greedy: the same call streamed
            self.assertEqual(r["stream"]["steps"][0]["calls"][0]["input"],
                             r["whole"]["steps"][0]["calls"][0]["input"])
            parts = r["stream"]["parts"]
            self.assertEqual(parts[0], "start")
            self.assertLess(parts.index("tool-call"), parts.index("tool-result"))
            self.assertEqual(parts[-1], "finish")
            # the JSON-schema answer passed the SDK's own zod validation
            o = r["object"]
            self.assertEqual(set(o), {"name", "age", "pet"})
            self.assertIn(o["pet"], ("cat", "dog"))
            self.assertTrue(0 <= o["age"] <= 120 and 1 <= len(o["name"]) <= 12, o)
            # a refusal shows warm-httpd's message
            ref = r["refused"]
            self.assertEqual((ref["name"], ref["status"]), ("AI_APICallError", 400), prov)
            self.assertIn("gem", ref["message"])
            self.assertIn("tools", ref["message"])
        # OpenAI's stream carries the arguments in fragments, which the SDK joins
        s = out["compat"]["stream"]
        self.assertGreater(s["parts"].count("tool-input-delta"), 1, s["parts"])
        self.assertEqual(json.loads(s["deltas"]), s["steps"][0]["calls"][0]["input"])


if __name__ == "__main__":
    main()
