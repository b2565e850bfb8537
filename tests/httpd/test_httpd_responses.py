"""warm-httpd: OpenAI's Responses API (POST /v1/responses, responses.c) against a real warmd
and a real warm-httpd, through the official openai npm package (the version test_httpd.py
pins; skipped with a message without npm), as Codex-style agents use it: responses.create
whole (output_text equal to warmctl chat's greedy text, usage) and streamed (event order,
sequence numbers, the deltas adding up to the whole text, the final event's response), a
function call forced with tool_choice {type: "function", name} on a chatml model with random
weights (arguments valid under the tool's parameters) whole and through responses.stream(),
the call and its function_call_output sent back as input items and answered (rendered as
warmd renders the same conversation over gRPC: equal prompt token counts), text.format
json_schema (the output parses and follows the schema), previous_response_id refused with
400 in OpenAI's error shape. With curl: hosted tools and image parts refused by name.

Needs root (setpriv); npm for the SDK case."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_httpd import N, USER_MSG, HttpdHarness  # noqa: E402
from warmd_harness import main, pb  # noqa: E402
from test_tools import CLOCK, TOOLS, valid  # noqa: E402  (tests/e2e)

RESP_TOOLS = [dict(type="function", strict=False, **t["function"]) for t in TOOLS]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "population": {"type": "integer"}},
          "required": ["city", "population"], "additionalProperties": False}


class HttpdResponsesTest(HttpdHarness):
    def grpc_prompt_tokens(self, args):
        msgs = [pb.ChatMessage(role="system", content="You tell the time."),
                pb.ChatMessage(role="user", content="What time is it in Paris?"),
                pb.ChatMessage(role="assistant", tool_calls=[pb.ToolCall(
                    name="get_time", arguments=args)]),
                pb.ChatMessage(role="tool", content="12:00", name="get_time")]
        for ev in self.d.stub().Chat(pb.ChatRequest(model="chatty", messages=msgs, max_tokens=1,
                                                    tools_json=json.dumps(TOOLS))):
            if ev.HasField("summary"):
                return ev.summary.prompt_tokens
        raise AssertionError("no summary")

    def test_sdk(self):
        self.start()
        want, summary = self.greedy("chat", "chatty", stdin=USER_MSG + "\n")
        out = self.node("responses_client.mjs", {"base": self.h.base + "/v1", "model": "chatty",
                                                 "prompt": USER_MSG, "max": N,
                                                 "tools": RESP_TOOLS, "schema": SCHEMA})
        # whole
        r = out["plain"]["response"]
        self.assertRegex(r["id"], r"^resp_[0-9a-f]{24}$")
        self.assertEqual((r["object"], r["model"]), ("response", "chatty"))
        self.assertEqual(out["plain"]["output_text"], want)
        msg = [i for i in r["output"] if i["type"] == "message"]
        self.assertEqual(len(msg), 1)
        self.assertEqual((msg[0]["role"], msg[0]["content"][0]["type"]),
                         ("assistant", "output_text"))
        u = r["usage"]
        self.assertEqual(u["input_tokens"], summary["prompt_tokens"])
        self.assertEqual(u["total_tokens"], u["input_tokens"] + u["output_tokens"])
        self.assertIn("cached_tokens", u["input_tokens_details"])
        self.assertEqual(u["output_tokens_details"]["reasoning_tokens"], 0)
        if r["status"] == "incomplete":
            self.assertEqual(r["incomplete_details"], {"reason": "max_output_tokens"})
            self.assertEqual(u["output_tokens"], N)
        else:
            self.assertEqual(r["status"], "completed")
        # streamed: the events in order, numbered, adding up to the whole text
        ev = out["stream"]
        types = [e["type"] for e in ev]
        self.assertEqual(types[:4], ["response.created", "response.in_progress",
                                     "response.output_item.added", "response.content_part.added"])
        self.assertEqual([e["sequence_number"] for e in ev], list(range(len(ev))))
        final = "response.completed" if r["status"] == "completed" else "response.incomplete"
        self.assertEqual(types[-4:], ["response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", final])
        self.assertEqual("".join(e["delta"] for e in ev
                                 if e["type"] == "response.output_text.delta"), want)
        last = ev[-1]["response"]
        self.assertEqual(last["output"][0]["content"][0]["text"], want)
        self.assertEqual(last["status"], r["status"])
        self.assertGreater(last["usage"]["input_tokens_details"]["cached_tokens"], 0)
        # a forced function call, whole and streamed alike (greedy)
        for k in ("tool", "tool_stream"):
            t = out[k] if k == "tool" else out[k]["response"]
            self.assertEqual(t["status"], "completed", k)
            calls = [i for i in t["output"] if i["type"] == "function_call"]
            self.assertEqual(len(calls), 1, k)
            self.assertEqual((calls[0]["name"], calls[0]["status"]), ("get_time", "completed"))
            self.assertTrue(calls[0]["call_id"].startswith("call_"), k)
            self.assertTrue(valid(CLOCK, json.loads(calls[0]["arguments"])), calls[0])
        self.assertEqual(out["tool_stream"]["events"][-1], "response.completed")
        self.assertIn("response.function_call_arguments.delta", out["tool_stream"]["events"])
        skip = ("id", "call_id", "parsed_arguments")  # random ids; the SDK's own field
        strip = lambda o: [{k: v for k, v in i.items() if k not in skip} for i in o]  # noqa
        self.assertEqual(strip(out["tool_stream"]["response"]["output"]),
                         strip(out["tool"]["output"]))
        # the call and its output sent back, rendered as warmd renders the conversation
        call = [i for i in out["tool"]["output"] if i["type"] == "function_call"][0]
        f = out["follow"]
        self.assertIn(f["status"], ("completed", "incomplete"))
        self.assertEqual(f["usage"]["input_tokens"], self.grpc_prompt_tokens(call["arguments"]))
        # text.format json_schema
        doc = json.loads(out["schema_text"])
        self.assertEqual(set(doc), {"city", "population"})
        self.assertIsInstance(doc["population"], int)
        # previous_response_id refused in OpenAI's shape
        p = out["previous"]
        self.assertEqual(p["status"], 400)
        self.assertEqual(p["body"]["param"], "previous_response_id")
        self.assertIn("no conversation", p["body"]["message"])

    def test_http(self):
        self.start()
        body = {"model": "chatty", "input": "Hi", "max_output_tokens": 2}
        err = self.jcurl("/v1/responses", dict(body, tools=[{"type": "web_search"}]), status=400)
        self.assertEqual(err["error"]["param"], "tools[0]")
        self.assertIn("web_search", err["error"]["message"])
        err = self.jcurl("/v1/responses", dict(body, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]), status=400)
        self.assertEqual(err["error"]["param"], "input[0].content[0]")
        st, text = self.curl("/v1/responses", dict(body, stream=True))
        self.assertEqual(st, 200, text)
        self.assertTrue(text.startswith("event: response.created\ndata: {"), text)
        # reasoning and developer items are read; the answer is a response
        ok = self.jcurl("/v1/responses", dict(body, input=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"type": "reasoning", "id": "rs_1", "summary": [
                {"type": "summary_text", "text": "greet"}]},
            {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": "Hello"}]},
            {"role": "user", "content": "Bye"}]))
        self.assertEqual(ok["object"], "response")
        self.assertEqual(self.jcurl("/v1/responses", dict(body, model="nope"),
                                    status=404)["error"]["type"], "not_found_error")


if __name__ == "__main__":
    main()
