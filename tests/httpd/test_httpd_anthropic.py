"""warm-httpd: Anthropic's Messages API (the issue "Agents and coding tools work against
warmd", item 5, the Anthropic half) against a real warmd and a real warm-httpd, through the
official @anthropic-ai/sdk npm package (pinned, installed into a scratch directory; skipped
with a message without npm), as Claude Code would use it with ANTHROPIC_BASE_URL pointing
at warm-httpd: POST /v1/messages whole (greedy text equal to warmctl chat's) and streamed
(the SDK's final message equal to the whole one; event order), a tool call forced with
tool_choice {type: "tool"} on a chatml model with random weights (name and input valid
under input_schema), the tool's result sent back (rendered as warmd renders the same
conversation over gRPC: equal prompt token counts) and answered, count_tokens (the rendered
prompt: positive, growing with the prompt, equal to a message's usage), errors in
Anthropic's shape (unknown model 404 not_found_error, max_tokens missing 400
invalid_request_error), and a Claude-Code-shaped streamed request (system blocks with
cache_control, tools, metadata, anthropic-beta). With curl: SSE event lines, refusals
named (an image block, thinking on a model that does not think), thinking blocks of a
qwen35 model (whose generation prompt opens the think block) whole and streamed.

Needs root (setpriv); npm for the SDK case."""

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_httpd import HERE, MKMODEL, N, USER_MSG, HttpdHarness  # noqa: E402
from warmd_harness import main, pb  # noqa: E402
from test_tools import CLOCK, TOOLS, valid  # noqa: E402  (tests/e2e)

SDK = "@anthropic-ai/sdk@1.17.0"
ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                    "input_schema": t["function"]["parameters"]} for t in TOOLS]


class Sdk:
    """@anthropic-ai/sdk from the npm registry, once per run, in a scratch directory."""
    dir = None
    why = None

    @classmethod
    def get(cls):
        if cls.dir or cls.why:
            return cls.dir
        npm = shutil.which("npm")
        if not npm or not shutil.which("node"):
            cls.why = "npm or node not found: the @anthropic-ai/sdk case is skipped"
            return None
        d = tempfile.mkdtemp(prefix="warm-httpd-anthropic-")
        atexit.register(shutil.rmtree, d, True)  # the packages are fetched once per run
        os.chmod(d, 0o755)
        p = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--ignore-scripts",
                            "--prefix", d, SDK], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise AssertionError(f"npm install {SDK} failed:\n{p.stderr}")
        shutil.copy(os.path.join(HERE, "anthropic_client.mjs"), d)
        cls.dir = d
        return d


class HttpdAnthropicTest(HttpdHarness):
    def sdk(self, cfg):
        d = Sdk.get()
        if not d:
            self.skipTest(Sdk.why)
        p = subprocess.run(["node", os.path.join(d, "anthropic_client.mjs"), json.dumps(cfg)],
                           cwd=d, capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, HOME=d))
        self.assertEqual(p.returncode, 0, f"{p.stderr}\n{self.h.text()[-3000:]}")
        return json.loads(p.stdout)

    def grpc_prompt_tokens(self, name, args):
        msgs = [pb.ChatMessage(role="user", content="What time is it in Paris?"),
                pb.ChatMessage(role="assistant", tool_calls=[pb.ToolCall(
                    name=name, arguments=args)]),
                pb.ChatMessage(role="tool", content="12:00", name=name)]
        for ev in self.d.stub().Chat(pb.ChatRequest(model="chatty", messages=msgs, max_tokens=1,
                                                    tools_json=json.dumps(TOOLS))):
            if ev.HasField("summary"):
                return ev.summary.prompt_tokens
        raise AssertionError("no summary")

    def prompt(self, usage):
        return usage["input_tokens"] + usage["cache_read_input_tokens"]

    def test_sdk(self):
        self.start()
        want, _ = self.greedy("chat", "chatty", stdin=USER_MSG + "\n")
        out = self.sdk({"base": self.h.base, "model": "chatty", "prompt": USER_MSG,
                        "max_tokens": N, "tools": ANTHROPIC_TOOLS})
        # a plain message, whole and streamed
        m = out["plain"]
        self.assertRegex(m["id"], r"^msg_[0-9a-f]{24}$")
        self.assertEqual((m["type"], m["role"], m["model"]), ("message", "assistant", "chatty"))
        self.assertEqual([b["type"] for b in m["content"]], ["text"])
        self.assertEqual(m["content"][0]["text"], want)
        self.assertIn(m["stop_reason"], ("end_turn", "max_tokens"))
        self.assertGreater(self.prompt(m["usage"]), 0)
        self.assertEqual(m["usage"]["output_tokens"], N if m["stop_reason"] == "max_tokens"
                         else m["usage"]["output_tokens"])
        s = out["stream"]
        self.assertEqual((s["message"]["content"], s["message"]["stop_reason"]),
                         (m["content"], m["stop_reason"]))
        self.assertEqual(self.prompt(s["message"]["usage"]), self.prompt(m["usage"]))
        # the second time the prompt came from warmd's cache
        self.assertGreater(s["message"]["usage"]["cache_read_input_tokens"], 0)
        ev = s["events"]
        self.assertEqual((ev[0], ev[1], ev[-2], ev[-1]), ("message_start", "content_block_start",
                                                          "message_delta", "message_stop"))
        self.assertEqual(ev.count("content_block_start"), 1)
        self.assertEqual(ev.count("content_block_stop"), 1)
        # a forced tool call, whole and streamed alike (greedy)
        for k in ("tool", "tool_stream"):
            t = out[k] if k == "tool" else out[k]["message"]
            self.assertEqual(t["stop_reason"], "tool_use", k)
            uses = [b for b in t["content"] if b["type"] == "tool_use"]
            self.assertEqual(len(uses), 1, k)
            self.assertEqual(uses[0]["name"], "get_time", k)
            self.assertTrue(valid(CLOCK, uses[0]["input"]), (k, uses[0]["input"]))
            self.assertTrue(uses[0]["id"], k)
        strip = lambda c: [{k: v for k, v in b.items() if k != "id"} for b in c]  # noqa: E731
        self.assertEqual(strip(out["tool_stream"]["message"]["content"]),
                         strip(out["tool"]["content"]))
        self.assertIn("input_json_delta", out["tool_stream"]["events"])
        # the tool's result, rendered as warmd renders the conversation, and answered
        use = [b for b in out["tool"]["content"] if b["type"] == "tool_use"][0]
        grpc = self.grpc_prompt_tokens("get_time",
                                       json.dumps(use["input"], separators=(",", ":")))
        f = out["follow"]
        self.assertIn(f["stop_reason"], ("end_turn", "max_tokens"))
        self.assertEqual(self.prompt(f["usage"]), grpc)
        # count_tokens: the rendered prompt
        self.assertEqual(out["count_follow"]["input_tokens"], grpc)
        self.assertEqual(out["count_short"]["input_tokens"], self.prompt(m["usage"]))
        self.assertGreater(out["count_short"]["input_tokens"], 0)
        self.assertGreater(out["count_long"]["input_tokens"], out["count_short"]["input_tokens"])
        # errors in Anthropic's shape
        u = out["unknown"]
        self.assertEqual(u["status"], 404)
        self.assertEqual((u["body"]["type"], u["body"]["error"]["type"]),
                         ("error", "not_found_error"))
        self.assertIn("no-such-model", u["body"]["error"]["message"])
        # Claude Code's shape of request, streamed
        cc = out["claude_code"]
        self.assertEqual((cc[0]["type"], cc[-1]["type"]), ("message_start", "message_stop"))
        delta = [e for e in cc if e["type"] == "message_delta"][0]
        self.assertIn(delta["delta"]["stop_reason"], ("end_turn", "max_tokens", "tool_use"))
        self.assertGreater(self.prompt(delta["usage"]), self.prompt(m["usage"]))

    def test_http(self):
        self.start(prepare=lambda d: subprocess.run(
            [MKMODEL, "--arch", "llama", "--chat-template", "qwen35", "--seed", "7", "-o",
             os.path.join(d.models, "thinker.gguf")], check=True, capture_output=True,
            timeout=120))
        body = {"model": "chatty", "messages": [{"role": "user", "content": "Hi"}]}
        err = self.jcurl("/v1/messages", body, status=400,
                         headers=("x-api-key: any", "anthropic-version: 2023-06-01"))
        self.assertEqual(err["type"], "error")
        self.assertEqual(err["error"]["type"], "invalid_request_error")
        self.assertIn("max_tokens", err["error"]["message"])
        # an image is refused by name, never dropped
        img = dict(body, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "AAAA"}}]}])
        err = self.jcurl("/v1/messages", img, status=400)
        self.assertIn("messages[0].content[0]", err["error"]["message"])
        # SSE with event lines, thinking refused for a model that does not think
        st, text = self.curl("/v1/messages", dict(body, max_tokens=4, stream=True))
        self.assertEqual(st, 200, text)
        self.assertTrue(text.startswith("event: message_start\ndata: {"), text)
        self.assertIn("event: message_stop\n", text)
        err = self.jcurl("/v1/messages", dict(body, max_tokens=4, thinking={
            "type": "enabled", "budget_tokens": 1024}), status=400)
        self.assertEqual(err["error"]["type"], "invalid_request_error")
        # a user turn of two text blocks and an assistant turn with a thinking block
        ok = self.jcurl("/v1/messages", dict(body, max_tokens=2, messages=[
            {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                         {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm",
                                               "signature": "x"},
                                              {"type": "text", "text": "Hello"}]},
            {"role": "user", "content": "Bye"}]))
        self.assertEqual(ok["type"], "message")
        # a thinking model: its reasoning is a thinking block before the text, whole and
        # streamed (thinking_delta); thinking disabled leaves it out
        think = dict(body, model="thinker", max_tokens=6, temperature=0,
                     thinking={"type": "enabled", "budget_tokens": 1024})
        whole = self.jcurl("/v1/messages", think)
        self.assertEqual(whole["content"][0]["type"], "thinking")
        self.assertTrue(whole["content"][0]["thinking"])
        st, text = self.curl("/v1/messages", dict(think, stream=True))
        self.assertEqual(st, 200, text)
        deltas = [json.loads(l[6:]) for l in text.splitlines() if l.startswith("data: ")]
        self.assertEqual("".join(e["delta"].get("thinking", "") for e in deltas
                                 if e["type"] == "content_block_delta"),
                         whole["content"][0]["thinking"])
        off = self.jcurl("/v1/messages", dict(think, thinking={"type": "disabled"}))
        self.assertNotIn("thinking", [b["type"] for b in off["content"]])
        self.assertEqual(self.jcurl("/v1/messages/count_tokens", {"model": "nope", "messages": [
            {"role": "user", "content": "Hi"}]}, status=404)["error"]["type"], "not_found_error")


if __name__ == "__main__":
    main()
