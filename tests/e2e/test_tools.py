"""Tools and thinking through the daemon's Chat, with generated models (warm-mkmodel): a
chatml one, a qwen3 one (<think> and </think> in its vocabulary), a qwen35 one (XML tool
calls; its generation prompt opens the think block), a gemma4 one (Gemma 4's call syntax)
and a gemma one (no tool format). Random weights cannot choose a tool, so tool_choice
REQUIRED or FUNCTION forces the call with a grammar from the tools' parameter schemas: the answer is a structured call
(Summary.tool_calls, stop reason TOOL_CALLS, nothing streamed as content) whose arguments
validate. The round trip (an assistant message with tool calls, the tool's result) renders
as the engine's template does (prompt tokens equal warm-chat-render's text, tokenized the
way the engine tokenizes; greedy output equals Generate on those tokens). Thinking off
renders the empty think block; reasoning streams apart from the answer (a grammar forces
"<think>...</think>answer"); text before a call streams and the call is parsed with
tool_choice AUTO; a call streams as pieces (its id and name, then its arguments as the
model writes them) before the summary lists it. Refusals: tools for a family without them naming the model, think on for
a family that does not think, a forced call with an output format, an unknown function."""

import json
import os
import re
import subprocess
import sys

from warmd_harness import BIN, DaemonTest, grpc, main, pb

C = grpc.StatusCode
MKMODEL = os.path.join(BIN, "warm-mkmodel")
RENDER = os.path.join(BIN, "warm-chat-render")
GREEDY = pb.Sampling(temperature=0)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city for some days.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a time zone.",
    "parameters": {"type": "object", "properties": {
        "tz": {"type": "string", "enum": ["UTC", "CET", "PST"]}},
        "required": ["tz"], "additionalProperties": False}}}
TOOLS = [WEATHER, CLOCK]


def valid(tool, args):
    """Whether args (a dict) validate against the tool's parameters (the keywords used)."""
    p = tool["function"]["parameters"]
    if set(args) - set(p["properties"]) or set(p["required"]) - set(args):
        return False
    for k, v in args.items():
        s = p["properties"][k]
        if s["type"] == "string":
            if not isinstance(v, str) or not s.get("minLength", 0) <= len(v) <= \
                    s.get("maxLength", len(v)) or ("enum" in s and v not in s["enum"]):
                return False
        elif s["type"] == "integer":
            if not isinstance(v, int) or not s["minimum"] <= v <= s["maximum"]:
                return False
    return True


def drain(stream, pieces=None):
    """(token ids, answer text, reasoning text, summary); the tool-call pieces that stream
    (index, id, name, arguments) appended to pieces."""
    ids, text, reasoning, summary = [], "", "", None
    for ev in stream:
        if ev.HasField("token") and ev.token.HasField("tool_call"):
            t = ev.token.tool_call
            if pieces is not None:
                pieces.append((t.index, t.id, t.name, t.arguments))
        elif ev.HasField("token"):
            if ev.token.id >= 0:
                ids.append(ev.token.id)
            text += ev.token.text
            reasoning += ev.token.reasoning
        elif ev.HasField("summary"):
            summary = ev.summary
    return ids, text, reasoning, summary


class ToolsTest(DaemonTest):
    @classmethod
    def setUpClass(cls):
        cls.skip = not os.path.exists(MKMODEL) or not os.path.exists(RENDER)

    def setUp(self):
        super().setUp()
        if self.skip:
            self.skipTest("warm-mkmodel or warm-chat-render not built")
        self.d = self.daemon(config="threads = 1\n")
        for name, tmpl in (("chatty", "chatml"), ("qwen", "qwen3"), ("q35", "qwen35"),
                           ("gem", "gemma"), ("g4", "gemma4")):
            subprocess.run([MKMODEL, "--arch", "llama", "--chat-template", tmpl, "--seed", "7",
                            "-o", os.path.join(self.d.models, name + ".gguf")],
                           check=True, capture_output=True, timeout=120)
        self.d.start()
        self.st = self.d.stub()

    def chat(self, model, msgs, **kw):
        kw.setdefault("sampling", GREEDY)
        kw.setdefault("max_tokens", 200)
        self.pieces = []
        return drain(self.st.Chat(pb.ChatRequest(model=model, messages=msgs, **kw)), self.pieces)

    def assertPieces(self, s):
        """The calls streamed piece by piece before the summary: each call's first piece has
        its index, id and name, the rest concatenate to its arguments. Returns the number of
        argument pieces per call."""
        n_args = []
        for i, c in enumerate(s.tool_calls):
            mine = [p for p in self.pieces if p[0] == i]
            self.assertTrue(mine, f"call {i} never streamed")
            self.assertEqual(mine[0][1:3], (c.id, c.name))
            self.assertTrue(all(not p[1] and not p[2] for p in mine[1:]), mine)
            args = "".join(p[3] for p in mine)
            self.assertEqual(json.loads(args), json.loads(c.arguments), args)
            n_args.append(sum(1 for p in mine if p[3]))
        self.assertEqual({p[0] for p in self.pieces}, set(range(len(s.tool_calls))))
        return n_args

    def engine_tokens(self, model, family, msgs, tools=None, flags=()):
        """The prompt as the engine renders it (warm-chat-render), tokenized as the engine
        tokenizes a rendering: the vocabulary's marker tokens by id, the text between them
        plainly, BOS first (the made-up vocabulary asks for it)."""
        doc = {"messages": msgs}
        if tools:
            doc["tools"] = tools
        text = subprocess.run([RENDER, family, "--generation-prompt", *flags],
                              input=json.dumps(doc), capture_output=True, text=True,
                              check=True).stdout
        markers = ["<|im_start|>", "<|im_end|>"] + (["<think>", "</think>"]
                                                    if family == "qwen3" else [])
        tok = lambda t, special=False: list(self.st.Tokenize(pb.TokenizeRequest(  # noqa: E731
            model=model, text=t, parse_special=special, add_special=False)).tokens)
        bos = list(self.st.Tokenize(pb.TokenizeRequest(model=model, text="x",
                                                       add_special=True)).tokens)[:1]
        out = bos
        for part in re.split("(" + "|".join(map(re.escape, markers)) + ")", text):
            if part in markers:
                ids = tok(part, True)
                self.assertEqual(len(ids), 1, part)
                out += ids
            elif part:
                out += tok(part)
        return text, out

    def assertCall(self, s, text, names, n=None):
        self.assertEqual(s.stop_reason, pb.STOP_REASON_TOOL_CALLS, text)
        self.assertEqual(text, "")  # the call is not content
        if n is not None:
            self.assertEqual(len(s.tool_calls), n)
        self.assertGreaterEqual(len(s.tool_calls), 1)
        tools = {t["function"]["name"]: t for t in TOOLS}
        for c in s.tool_calls:
            self.assertIn(c.name, names)
            self.assertRegex(c.id, r"^call_[A-Za-z0-9]{24}$")
            self.assertTrue(valid(tools[c.name], json.loads(c.arguments)), c.arguments)
        self.assertEqual(len({c.id for c in s.tool_calls}), len(s.tool_calls))

    def test_forced_calls(self):
        user = [pb.ChatMessage(role="user", content="Weather in Paris for two days?")]
        for model in ("chatty", "qwen"):
            for sp in (GREEDY, pb.Sampling(temperature=1.0, seed=3)):
                _, text, r, s = self.chat(model, user, tools_json=json.dumps(TOOLS),
                                          tool_choice=pb.TOOL_CHOICE_REQUIRED, max_tool_calls=1,
                                          sampling=sp)
                self.assertCall(s, text, ("get_weather", "get_time"), n=1)
                self.assertEqual(r, "")  # a forced call turns thinking off
                # the arguments stream as the model writes them, token by token
                self.assertGreater(self.assertPieces(s)[0], 1, self.pieces)
            _, text, _, s = self.chat(model, user, tools_json=json.dumps(TOOLS),
                                      tool_choice=pb.TOOL_CHOICE_FUNCTION,
                                      tool_choice_name="get_time", max_tool_calls=1)
            self.assertCall(s, text, ("get_time",), n=1)
            _, text, _, s = self.chat(model, user, tools_json=json.dumps(TOOLS),
                                      tool_choice=pb.TOOL_CHOICE_REQUIRED, max_tokens=400,
                                      sampling=pb.Sampling(temperature=1.0, seed=5))
            if s.stop_reason != pb.STOP_REASON_MAX_TOKENS:  # one or more calls
                self.assertCall(s, text, ("get_weather", "get_time"))
                self.assertPieces(s)
        # Qwen3.5's XML calls (an enum parameter: a random model cannot end free text)
        for sp in (GREEDY, pb.Sampling(temperature=1.0, seed=3)):
            _, text, r, s = self.chat("q35", user, tools_json=json.dumps(TOOLS),
                                      tool_choice=pb.TOOL_CHOICE_FUNCTION,
                                      tool_choice_name="get_time", sampling=sp)
            self.assertCall(s, text, ("get_time",), n=1)
            self.assertEqual(r, "")
            # XML arguments come whole, after the name that streamed
            self.assertEqual(self.assertPieces(s), [1])
        # Gemma 4's calls (its own value syntax; the arguments come whole, as JSON)
        for sp in (GREEDY, pb.Sampling(temperature=1.0, seed=3)):
            _, text, _, s = self.chat("g4", user, tools_json=json.dumps(TOOLS),
                                      tool_choice=pb.TOOL_CHOICE_FUNCTION,
                                      tool_choice_name="get_time", sampling=sp)
            self.assertCall(s, text, ("get_time",), n=1)
            self.assertEqual(self.assertPieces(s), [1])

    def test_round_trip_renders_like_the_engine(self):
        tools = json.dumps(TOOLS)
        for model, family in (("chatty", "chatml"), ("qwen", "qwen3")):
            user = {"role": "user", "content": "Time in Berlin?"}
            _, _, _, s = self.chat(model, [pb.ChatMessage(**user)], tools_json=tools,
                                   tool_choice=pb.TOOL_CHOICE_FUNCTION,
                                   tool_choice_name="get_time", max_tool_calls=1)
            call = s.tool_calls[0]
            msgs = [user, {"role": "assistant", "content": "",
                           "tool_calls": [{"function": {"name": call.name,
                                                        "arguments": call.arguments}}]},
                    {"role": "tool", "content": '{"time": "12:00"}'}]
            pmsgs = [pb.ChatMessage(**user),
                     pb.ChatMessage(role="assistant", tool_calls=[call]),
                     pb.ChatMessage(role="tool", content=msgs[2]["content"],
                                    tool_call_id=call.id, name=call.name)]
            text, want = self.engine_tokens(model, family, msgs, TOOLS)
            self.assertIn("<tool_response>\n" + msgs[2]["content"] + "\n</tool_response>", text)
            self.assertIn('"arguments": ' + json.dumps(json.loads(call.arguments)), text)
            ids, out, _, s2 = self.chat(model, pmsgs, tools_json=tools, max_tokens=16,
                                        think=pb.THINK_OFF if family == "qwen3" else 0)
            if family == "qwen3":  # the rendering above had thinking on
                text, want = self.engine_tokens(model, family, msgs, TOOLS, ["--no-thinking"])
            self.assertEqual(s2.prompt_tokens, len(want))
            g = list(self.st.Generate(pb.GenerateRequest(model=model, tokens=want,
                                                         sampling=GREEDY, max_tokens=16)))
            self.assertEqual(ids, [e.token.id for e in g if e.HasField("token")
                                   and e.token.id >= 0])
            # tool_choice NONE: the tools are not in the prompt
            _, _, _, s3 = self.chat(model, pmsgs, tools_json=tools, max_tokens=1,
                                    tool_choice=pb.TOOL_CHOICE_NONE,
                                    think=pb.THINK_OFF if family == "qwen3" else 0)
            _, no_tools = self.engine_tokens(model, family, msgs, None,
                                             ["--no-thinking"] if family == "qwen3" else [])
            self.assertEqual(s3.prompt_tokens, len(no_tools))

    def test_thinking_off_and_split(self):
        user = {"role": "user", "content": "Why is the sky blue?"}
        msgs = [pb.ChatMessage(**user)]
        _, on = self.engine_tokens("qwen", "qwen3", [user])
        text_off, off = self.engine_tokens("qwen", "qwen3", [user], None, ["--no-thinking"])
        self.assertTrue(text_off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"))
        for think, want in ((pb.THINK_DEFAULT, on), (pb.THINK_ON, on), (pb.THINK_OFF, off)):
            _, _, _, s = self.chat("qwen", msgs, think=think, max_tokens=1)
            self.assertEqual(s.prompt_tokens, len(want), think)
        self.assertGreater(len(off), len(on))
        # The reasoning streams apart from the answer; the tags and the blank lines go.
        fmt = pb.OutputFormat(grammar='root ::= "<think>\\nstep " [a-z]{1,8} " done\\n</think>'
                                      '\\n\\n" "ans " [a-z]{1,8}')
        for seed in (1, 2):
            ids, text, reasoning, s = self.chat("qwen", msgs, format=fmt, sampling=pb.Sampling(
                temperature=1.0, seed=seed))
            self.assertEqual(s.stop_reason, pb.STOP_REASON_EOS)
            self.assertRegex(reasoning, r"^step [a-z]{1,8} done$")
            self.assertRegex(text, r"^ans [a-z]{1,8}$")
            # the same tokens without the split (Generate) hold both, tags included
            raw = "".join(e.token.text for e in self.st.Generate(pb.GenerateRequest(
                model="qwen", tokens=self.engine_tokens("qwen", "qwen3", [user])[1],
                format=fmt, sampling=pb.Sampling(temperature=1.0, seed=seed), max_tokens=200))
                if e.HasField("token"))
            self.assertEqual(raw, f"<think>\n{reasoning}\n</think>\n\n{text}")
        # thinking off: everything is answer
        _, text, reasoning, _ = self.chat("qwen", msgs, think=pb.THINK_OFF, max_tokens=20,
                                          format=pb.OutputFormat(grammar='root ::= "<think>x"'))
        self.assertEqual((text, reasoning), ("<think>x", ""))

    def test_text_then_call_with_auto(self):
        call = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>'
        fmt = pb.OutputFormat(grammar="root ::= " + json.dumps("Let me look.\n" + call))
        msgs = [pb.ChatMessage(role="user", content="Time?")]
        _, text, _, s = self.chat("chatty", msgs, tools_json=json.dumps(TOOLS), format=fmt)
        self.assertEqual(text, "Let me look.")
        self.assertEqual(s.stop_reason, pb.STOP_REASON_TOOL_CALLS)
        self.assertEqual([(c.name, json.loads(c.arguments)) for c in s.tool_calls],
                         [("get_time", {"tz": "CET"})])
        # without tools the same answer is text
        _, text, _, s = self.chat("chatty", msgs, format=fmt)
        self.assertEqual(text, "Let me look.\n" + call)
        self.assertEqual(len(s.tool_calls), 0)
        # a call that does not parse stays text
        bad = pb.OutputFormat(grammar="root ::= " + json.dumps("Hm <tool_call>\nnot json"))
        _, text, _, s = self.chat("chatty", msgs, tools_json=json.dumps(TOOLS), format=bad)
        self.assertEqual(text, "Hm <tool_call>\nnot json")
        self.assertEqual(s.stop_reason, pb.STOP_REASON_EOS)

    def test_warmctl_and_python_client(self):
        tools = os.path.join(self.tmp, "tools.json")
        with open(tools, "w") as f:
            json.dump(TOOLS, f)
        p = subprocess.run([os.path.join(BIN, "warmctl"), "--socket", self.d.socket, "chat",
                            "qwen", "--tools", tools, "--tool-choice", "get_time", "--greedy",
                            "--json"], input="Time?\n", capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        summary = [json.loads(l) for l in p.stdout.splitlines()][-1]["summary"]
        self.assertEqual(summary["stop_reason"], "tool_calls")
        (call,) = summary["tool_calls"]
        self.assertEqual(call["name"], "get_time")
        self.assertTrue(valid(CLOCK, json.loads(call["arguments"])))
        # thinking: the reasoning on its own lines (a qwen35 model thinks from the start)
        p = subprocess.run([os.path.join(BIN, "warmctl"), "--socket", self.d.socket, "chat",
                            "q35", "--greedy", "-n", "6", "--json"], input="Hi\n",
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = [json.loads(l) for l in p.stdout.splitlines()]
        self.assertTrue(any("reasoning" in l for l in lines), lines)
        p = subprocess.run([os.path.join(BIN, "warmctl"), "--socket", self.d.socket, "chat",
                            "chatty", "--think", "on"], input="Hi\n", capture_output=True,
                           text=True, timeout=120)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("does not support thinking", p.stderr)
        # the Python client
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "client", "python"))
        from warm_client import Client
        with Client(self.d.socket) as c:
            s = c.chat("chatty", [{"role": "user", "content": "Time?"}], tools=TOOLS,
                       tool_choice="required", parallel_tool_calls=False, temperature=0,
                       max_tokens=200)
            self.assertEqual(s.text(), "")
            (call,) = s.tool_calls
            self.assertIn(call["name"], ("get_weather", "get_time"))
            msgs = [{"role": "user", "content": "Time?"},
                    {"role": "assistant", "tool_calls": [
                        {"id": call["id"], "function": {"name": call["name"],
                                                        "arguments": call["arguments"]}}]},
                    {"role": "tool", "tool_call_id": call["id"], "content": "12:00"}]
            s2 = c.chat("chatty", msgs, tools=TOOLS, max_tokens=2, temperature=0)
            s2.text()
            self.assertEqual(s2.summary.prompt_tokens, len(self.engine_tokens(
                "chatty", "chatml", [msgs[0], {"role": "assistant", "content": "",
                                               "tool_calls": msgs[1]["tool_calls"]},
                                     {"role": "tool", "content": "12:00"}], TOOLS)[1]))
            s3 = c.chat("q35", [("user", "Hi")], think=True, max_tokens=6, temperature=0)
            self.assertEqual(s3.text(), "")
            self.assertTrue(s3.reasoning)
            s4 = c.chat("q35", [("user", "Hi")], think=False, max_tokens=6, temperature=0)
            s4.text()
            self.assertEqual(s4.reasoning, "")

    def test_refusals(self):
        msgs = [pb.ChatMessage(role="user", content="Hi")]
        tools = json.dumps(TOOLS)
        e = self.assertCode(lambda: self.st.Chat(pb.ChatRequest(
            model="gem", messages=msgs, tools_json=tools)), C.INVALID_ARGUMENT)
        self.assertIn("gem", e.details())
        self.assertIn("does not support tools", e.details())
        # tool_choice none with a family without tools: nothing is rendered, nothing refused
        _, _, _, s = self.chat("gem", msgs, tools_json=tools, tool_choice=pb.TOOL_CHOICE_NONE,
                               max_tokens=1)
        self.assertIsNotNone(s)
        self.assertCode(lambda: self.st.Chat(pb.ChatRequest(
            model="chatty", messages=msgs, think=pb.THINK_ON)), C.INVALID_ARGUMENT,
            "model chatty does not support thinking")
        self.assertCode(lambda: self.st.Chat(pb.ChatRequest(
            model="chatty", messages=msgs, tools_json=tools, tool_choice=pb.TOOL_CHOICE_REQUIRED,
            format=pb.OutputFormat(json_schema="{}"))), C.INVALID_ARGUMENT, "format")
        self.assertCode(lambda: self.st.Chat(pb.ChatRequest(
            model="chatty", messages=msgs, tools_json=tools, tool_choice=pb.TOOL_CHOICE_FUNCTION,
            tool_choice_name="nope")), C.INVALID_ARGUMENT, "no tool is named 'nope'")
        self.assertCode(lambda: self.st.Chat(pb.ChatRequest(
            model="chatty", messages=msgs, tool_choice=pb.TOOL_CHOICE_REQUIRED)),
            C.INVALID_ARGUMENT, "needs tools_json")
        self.assertCode(lambda: self.st.Chat(pb.ChatRequest(
            model="qwen", messages=msgs, tools_json=tools, tool_choice=pb.TOOL_CHOICE_REQUIRED,
            think=pb.THINK_ON)), C.INVALID_ARGUMENT, "forced tool call")
        self.assertCode(lambda: self.st.Chat(pb.ChatRequest(
            model="gem", messages=[pb.ChatMessage(role="user", content="a"),
                                   pb.ChatMessage(role="tool", content="b")])),
            C.INVALID_ARGUMENT)
        self.assertEqual(self.d.stop(), 0)


if __name__ == "__main__":
    main()
