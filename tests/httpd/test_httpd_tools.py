"""warm-httpd: tools and reasoning (the issue "Agents and coding tools work against warmd",
items 2 and 3) against a real warmd and a real warm-httpd, through the official openai and
ollama npm packages. Generated models (warm-mkmodel): chatml (tools), qwen3 (tools and
thinking), qwen35 (its generation prompt opens the think block, so a model with random
weights "thinks" from the first token) and gemma (no tool format). Random weights cannot
choose a tool, so tool_choice forces the call: the SDKs' parsed tool_calls (whole, and
streamed as OpenAI streams them), arguments valid under the tool's parameters, finish_reason
"tool_calls" (Ollama: done_reason "stop"), streamed arguments in more than one fragment that
the SDK accumulates to the call's arguments; the tool's result sent back renders as warmd
renders the same conversation over gRPC (equal prompt token counts); reasoning_content and
message.thinking whole and streamed, off with reasoning_effort "none" and think false;
think refused for a model that does not think, tools for one without a tool format;
/api/show's capabilities (as Zed reads them).

Needs root (setpriv); npm for the SDK cases (skipped with a message without it)."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_httpd import MKMODEL, HttpdHarness  # noqa: E402
from warmd_harness import main, pb  # noqa: E402
from test_tools import TOOLS, valid  # noqa: E402  (tests/e2e)

USER = "What time is it in Paris?"


def add_models(d):
    for name, tmpl in (("qwen", "qwen3"), ("thinker", "qwen35"), ("gem", "gemma")):
        subprocess.run([MKMODEL, "--arch", "llama", "--chat-template", tmpl, "--seed", "7",
                        "-o", os.path.join(d.models, name + ".gguf")],
                       check=True, capture_output=True, timeout=120)


class HttpdToolsTest(HttpdHarness):
    def assertCalls(self, calls, names, what):
        tools = {t["function"]["name"]: t for t in TOOLS}
        self.assertEqual(len(calls), 1, what)
        for c in calls:
            self.assertIn(c["function"]["name"], names, what)
            args = c["function"]["arguments"]
            args = json.loads(args) if isinstance(args, str) else args
            self.assertTrue(valid(tools[c["function"]["name"]], args), (what, args))

    def grpc_prompt_tokens(self, model, call_name, call_args):
        """warmd's prompt for user, the assistant's call and the tool's result "12:00"."""
        msgs = [pb.ChatMessage(role="user", content=USER),
                pb.ChatMessage(role="assistant", tool_calls=[pb.ToolCall(
                    name=call_name, arguments=call_args)]),
                pb.ChatMessage(role="tool", content="12:00")]
        for ev in self.d.stub().Chat(pb.ChatRequest(model=model, messages=msgs, max_tokens=1,
                                                    tools_json=json.dumps(TOOLS))):
            if ev.HasField("summary"):
                return ev.summary.prompt_tokens
        raise AssertionError("no summary")

    def test_openai_sdk(self):
        self.start(prepare=add_models)
        out = self.node("tools_openai_client.mjs", {
            "base": self.h.base + "/v1", "model": "chatty", "think_model": "thinker",
            "no_tools_model": "gem", "tools": TOOLS})
        for k in ("whole", "stream", "named"):
            m = out[k]["message"]
            self.assertEqual(out[k]["finish"], "tool_calls", k)
            self.assertIsNone(m["content"], k)
            self.assertCalls(m["tool_calls"], ("get_weather", "get_time") if k != "named"
                             else ("get_time",), k)
            self.assertRegex(m["tool_calls"][0]["id"], r"^call_[A-Za-z0-9]{24}$")
            self.assertEqual(m["tool_calls"][0]["type"], "function")
        # greedy: the same call streamed; the name comes first, then the arguments in
        # fragments as the model writes them, which the SDK accumulates
        fn = lambda k: out[k]["message"]["tool_calls"][0]["function"]  # noqa: E731
        self.assertEqual(fn("stream")["name"], fn("whole")["name"])
        self.assertEqual(json.loads(fn("stream")["arguments"]), json.loads(fn("whole")["arguments"]))
        first, *rest = out["stream"]["deltas"]
        self.assertEqual((first[0]["index"], first[0]["type"], first[0]["function"]),
                         (0, "function", {"name": fn("whole")["name"], "arguments": ""}))
        self.assertGreater(len(rest), 1, rest)  # more than one argument fragment
        self.assertTrue(all(d[0]["index"] == 0 and set(d[0]["function"]) == {"arguments"}
                            for d in rest), rest)
        self.assertEqual("".join(d[0]["function"]["arguments"] for d in rest),
                         fn("stream")["arguments"])
        # the tool's result is rendered as warmd renders the conversation
        self.assertIn(out["follow"]["finish"], ("stop", "length"))
        self.assertEqual(out["follow"]["usage"]["prompt_tokens"], self.grpc_prompt_tokens(
            "chatty", fn("whole")["name"], fn("whole")["arguments"]))
        # reasoning apart from the content, whole and streamed alike; off with "none"
        self.assertTrue(out["think"]["reasoning_content"])
        self.assertEqual(out["think_stream"], {"reasoning": out["think"]["reasoning_content"],
                                               "content": out["think"]["content"]})
        self.assertFalse(out["think_off"].get("reasoning_content"))
        self.assertEqual(out["refused"]["status"], 400)
        self.assertIn("gem", out["refused"]["message"])
        self.assertIn("tools", out["refused"]["message"])

    def test_ollama_sdk(self):
        self.start(prepare=add_models)
        out = self.node("tools_ollama_client.mjs", {
            "host": self.h.base, "model": "chatty", "think_model": "thinker", "tools": TOOLS})
        w = out["whole"]
        self.assertEqual(w["done_reason"], "stop")
        self.assertEqual(w["message"]["content"], "")
        self.assertCalls(w["message"]["tool_calls"], ("get_time",), "whole")
        self.assertIsInstance(w["message"]["tool_calls"][0]["function"]["arguments"], dict)
        s = out["stream"]
        self.assertEqual((s["content"], s["done_reason"]), ("", "stop"))
        self.assertEqual([c["function"] for c in s["tool_calls"]],
                         [c["function"] for c in w["message"]["tool_calls"]])
        args = json.dumps(w["message"]["tool_calls"][0]["function"]["arguments"],
                          separators=(",", ":"))
        self.assertEqual(out["follow"]["prompt_eval_count"],
                         self.grpc_prompt_tokens("chatty", "get_time", args))
        self.assertTrue(out["think_on"].get("thinking"))
        self.assertFalse(out["think_off"].get("thinking"))
        self.assertEqual(out["think_stream"], {"thinking": out["think_on"]["thinking"],
                                               "content": out["think_on"]["content"]})
        self.assertEqual(out["think_refused"]["status"], 400)
        self.assertIn("does not support thinking", out["think_refused"]["message"])
        self.assertEqual(out["show"]["chatty"], ["completion", "tools"])
        self.assertEqual(out["show"]["thinker"], ["completion", "tools", "thinking"])
        self.assertEqual(self.jcurl("/api/show", {"model": "qwen"})["capabilities"],
                         ["completion", "tools", "thinking"])
        self.assertEqual(self.jcurl("/api/show", {"model": "gem"})["capabilities"],
                         ["completion"])


if __name__ == "__main__":
    main()
