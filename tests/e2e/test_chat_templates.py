"""Chat families against the official templates: the conversation warmd renders with its
built-in family (warm-chat-render, engine/chat.h) equals, byte for byte, the publisher's
Jinja template (../shared/models/templates/) rendered by python3-jinja2 the way Hugging Face
does. Qwen2.5 (chatml), Qwen3 (thinking: reasoning of turns before the last user message
dropped, enable_thinking false) and Qwen3.5 (trimmed contents, the think block opened by the
generation prompt), Gemma 2, Llama 3.1/3.2 (the date header, tools in the first user message,
ipython results) and gpt-oss harmony (effort, the tools as TypeScript, channels, calls and
results); and every template file detected as its family. No daemon."""

import json
import os
import subprocess
import unittest

from warmd_harness import BIN, SHARED, main

TEMPLATES = os.path.join(SHARED, "templates") if SHARED else ""
RENDER = os.path.join(BIN, "warm-chat-render")

try:
    import jinja2
except ImportError:  # Debian's python3-jinja2 (scripts/deps.sh installs it)
    jinja2 = None


def jinja_render(path, messages, add_generation_prompt, enable_thinking=None, tools=None,
                 clock=True, **extra):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                             extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(msg):
        raise ValueError(msg)

    env.globals["raise_exception"] = raise_exception
    if clock:  # Llama 3.2 without it prints its default date, as warmd does (engine/chat.h)
        env.globals["strftime_now"] = lambda fmt: "2026-12-04" if fmt == "%Y-%m-%d" else "04 Dec 2026"
    env.filters["tojson"] = lambda x, indent=None, **kw: json.dumps(x, indent=indent, ensure_ascii=False)
    with open(path, encoding="utf-8") as f:
        tmpl = env.from_string(f.read())
    if enable_thinking is not None:
        extra["enable_thinking"] = enable_thinking
    bos = "<|begin_of_text|>" if "Llama-3" in path else "<bos>"
    return tmpl.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                       bos_token=bos, eos_token="<eos>", **extra)


def warm_render(family, messages, add_generation_prompt, no_thinking=False, tools=None, extra=()):
    args = [RENDER, family] + (["--generation-prompt"] if add_generation_prompt else []) \
        + (["--no-thinking"] if no_thinking else []) + list(extra)
    doc = {"messages": messages, "tools": tools} if tools else messages
    p = subprocess.run(args, input=json.dumps(doc).encode(), capture_output=True, timeout=30)
    if p.returncode != 0:
        raise ValueError(p.stderr.decode())
    return p.stdout.decode()


SYS = {"role": "system", "content": "You are terse.\n"}
U1 = {"role": "user", "content": "What is 2+2?"}
A1_THINK = {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"}
A1_SPLIT = {"role": "assistant", "content": "4", "reasoning_content": "\nAdd them.\n"}
A1_PLAIN = {"role": "assistant", "content": "  4 "}
U2 = {"role": "user", "content": "  And 3+3? "}
A2_THINK = {"role": "assistant", "content": "<think>first</think>\n<think>\nsecond\n</think>\n\n6 "}

CONVERSATIONS = [
    [U1],
    [SYS, U1],
    [SYS, U1, A1_THINK, U2],
    [SYS, U1, A1_SPLIT, U2],
    [U1, A1_PLAIN, U2],
    [SYS, U1, A1_THINK],           # the last turn is the assistant's, after the query
    [U1, A1_THINK, U2, A2_THINK],
    [U1, A1_PLAIN],
    [U1, {"role": "assistant", "content": "no think here"}, U2, A1_SPLIT],
]


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "La température d'une ville",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1},
            "units": {"type": "string", "enum": ["C", "F"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "now", "description": "The time", "parameters": {
        "type": "object", "properties": {}}}},
]


# every schema shape gpt-oss's template writes in its own way
WIDE_TOOL = {"type": "function", "function": {
    "name": "search", "description": "Search the notes",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "what to look for"},
        "limit": {"type": "integer", "default": 5},
        "order": {"type": "string", "enum": ["new", "old"], "default": "new"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "ids": {"type": "array", "items": {"type": "integer"}, "nullable": True},
        "filters": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}, "ok": {"type": "boolean"}},
                  "required": ["lat"]},
        "when": {"oneOf": [{"type": "string"}, {"type": "integer", "description": "epoch"}]},
        "note": {"type": "string", "nullable": True},
        "kind": {"type": ["string", "number"]},
        "extra": {}}, "required": ["query"]}}}


def call(name, args):
    return {"type": "function", "function": {"name": name, "arguments": args}}


A_CALL = {"role": "assistant", "content": "",
          "tool_calls": [call("get_weather", {"city": "Paris", "days": 2, "units": "C"})]}
A_CALL_TEXT = {"role": "assistant", "content": "Let me look.",
               "tool_calls": [call("get_weather", {"city": "Köln", "opts": {"x": [1, 2.5, None, True]}}),
                              call("now", {})]}
A_CALL_THINK = {"role": "assistant", "content": "<think>\nNeed the weather.\n</think>\n\n",
                "tool_calls": [call("now", {})]}
T1 = {"role": "tool", "content": "sunny, 21"}
T2 = {"role": "tool", "content": " 12:00 "}
A_DONE = {"role": "assistant", "content": "Sunny and 21 degrees."}

TOOL_CONVERSATIONS = [
    [SYS, U1],
    [SYS, U1, A_CALL, T1],
    [SYS, U1, A_CALL, T1, A_DONE, U2],
    [SYS, U1, A_CALL_TEXT, T1, T2],
    [SYS, U1, A_CALL_TEXT, T1, T2, A_DONE],
    [SYS, U1, A_CALL_THINK, T2],
    [SYS, U1, A1_THINK, U2, A_CALL_THINK, T2, A_DONE],
]


@unittest.skipUnless(jinja2, "python3-jinja2 is not installed")
class ChatTemplateTest(unittest.TestCase):
    def setUp(self):
        if not TEMPLATES or not os.path.isdir(TEMPLATES):
            self.skipTest("../shared/models/templates is absent")
        if not os.path.exists(RENDER):
            self.skipTest("warm-chat-render not built")

    def check(self, template, family, conversations, thinking=(None,), tools=None, clock=True):
        n = 0
        for msgs in conversations:
            for gen in (True, False):
                for think in thinking:
                    try:
                        want = jinja_render(os.path.join(TEMPLATES, template), msgs, gen, think, tools,
                                            clock=clock)
                    except ValueError as e:  # the template refuses it: so must warmd
                        with self.assertRaises(ValueError, msg=f"{family} accepted what {template} refuses ({e})"):
                            warm_render(family, msgs, gen, think is False, tools)
                        continue
                    got = warm_render(family, msgs, gen, think is False, tools)
                    self.assertEqual(got, want, f"{family} vs {template}: messages {json.dumps(msgs)}, "
                                                f"generation prompt {gen}, enable_thinking {think}")
                    n += 1
        return n

    def test_qwen25_chatml(self):
        """With a system message (without one, Qwen2.5's template supplies its own default
        system prompt, which the chatml family does not)."""
        convs = [[SYS, U1], [SYS, U1, A1_PLAIN, U2], [SYS, U1, {"role": "assistant", "content": "4"}]]
        self.assertEqual(self.check("Qwen-Qwen2.5-7B-Instruct.jinja", "chatml", convs), 6)

    def test_qwen3_thinking(self):
        n = self.check("Qwen-Qwen3-0.6B.jinja", "qwen3", CONVERSATIONS, thinking=(None, False))
        self.assertGreaterEqual(n, 30)

    def test_qwen35_thinking(self):
        n = self.check("Qwen3.5-4B.jinja", "qwen35", CONVERSATIONS, thinking=(None, False))
        self.assertGreaterEqual(n, 30)

    def test_tools_qwen25(self):
        self.assertEqual(self.check("Qwen-Qwen2.5-7B-Instruct.jinja", "chatml",
                                    [c for c in TOOL_CONVERSATIONS if A_CALL_THINK not in c], tools=TOOLS), 10)

    def test_tools_qwen3(self):
        n = self.check("Qwen-Qwen3-0.6B.jinja", "qwen3", TOOL_CONVERSATIONS, (None, False), TOOLS)
        self.assertEqual(n, 28)

    def test_tools_qwen35(self):
        n = self.check("Qwen3.5-4B.jinja", "qwen35", TOOL_CONVERSATIONS, (None, False), TOOLS)
        self.assertEqual(n, 28)

    def test_tools_refused_where_the_family_has_none(self):
        """Gemma 2/3 and Llama 3(.0) have no tool format: tools are refused."""
        with self.assertRaisesRegex(ValueError, "no tool format"):
            warm_render("gemma", [U1], True, tools=TOOLS)
        with self.assertRaisesRegex(ValueError, "has no tool calls"):
            warm_render("llama3", [U1, A_CALL, T1], True)

    def test_parse_tool_calls(self):
        """What a model writes in each family's format comes back as name and arguments."""
        def parse(family, text):
            p = subprocess.run([RENDER, family, "--parse"], input=text.encode(), capture_output=True,
                               timeout=30, check=True)
            return json.loads(p.stdout)
        hermes = 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n' \
                 '</tool_call>\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'
        for fam in ("chatml", "qwen3"):
            got = parse(fam, hermes)
            self.assertEqual(got["content"], "Let me look.")
            self.assertEqual(got["tool_calls"], [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
                                                 {"name": "now", "arguments": {}}])
        xml = "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n" \
              "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"a\": [1]}\n</parameter>\n" \
              "</function>\n</tool_call>"
        got = parse("qwen35", xml)
        self.assertEqual(got, {"content": "", "reasoning": "", "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "New York", "days": 3, "opts": {"a": [1]}}}]})
        # broken JSON stays text; a family without tools finds none
        self.assertEqual(parse("qwen3", "<tool_call>\n{\"name\": </tool_call>")["tool_calls"], [])
        self.assertEqual(parse("gemma", hermes)["tool_calls"], [])
        # the rendering of a call parses back to it (the prompt and the parser agree)
        rendered = warm_render("qwen35", [U1, A_CALL_TEXT], False)
        turn = rendered.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
        self.assertEqual([c["name"] for c in parse("qwen35", turn)["tool_calls"]], ["get_weather", "now"])

    def test_llama31(self):
        """Llama 3.1 and 3.2: the date header always, the tool list (JSON, indent 4) in the
        first user message, one JSON call per assistant turn, results as ipython turns holding
        a JSON string; 3.2 rendered without a clock (its template then prints the same default
        date as 3.1, which is what warmd prints: engine/chat.h says why)."""
        convs = [[U1], [SYS, U1], [SYS, U1, A1_PLAIN, U2], [U1, A1_PLAIN]]
        tool_convs = [[SYS, U1], [U1], [SYS, U1, A_CALL, T1], [SYS, U1, A_CALL, T1, A_DONE, U2],
                      [U1, A_CALL, T2, A_DONE], [SYS, U1, A_CALL_TEXT, T1]]
        for tmpl in ("meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja"):
            n = self.check(tmpl, "llama31", convs, clock=False)
            self.assertEqual(n, 8, tmpl)
            n = self.check(tmpl, "llama31", tool_convs, tools=TOOLS + [WIDE_TOOL], clock=False)
            self.assertEqual(n, 10, tmpl)  # A_CALL_TEXT (two calls) is refused by both
        with self.assertRaisesRegex(ValueError, "one tool call per assistant message"):
            warm_render("llama31", [U1, A_CALL_TEXT], True)

    def test_harmony(self):
        """gpt-oss: the system message with the date and the reasoning effort, the developer
        message with the instructions and the tools as a TypeScript namespace (every schema
        shape the template writes: enums, defaults, arrays, nested objects, oneOf), final
        answers, the analysis of a call kept until a final answer follows, calls and results."""
        h_call = {"role": "assistant", "content": "", "thinking": "Need the weather.",
                  "tool_calls": [call("get_weather", {"city": "Paris", "days": 2})]}
        h_call_text = {"role": "assistant", "content": "Let me look.",
                       "tool_calls": [call("now", {})]}
        h_done = {"role": "assistant", "content": "Sunny.", "thinking": "It said sunny."}
        convs = [[U1], [SYS, U1], [SYS, U1, A1_PLAIN, U2], [U1, h_done], [SYS, U1, h_call, T1],
                 [SYS, U1, h_call, T1, h_done], [SYS, U1, h_call, T1, h_done, U2],
                 [U1, h_call_text, T2], [U1, h_call_text, T2, h_done, U2, h_call, T1]]
        for effort in (None, "low", "high"):
            extra = {"reasoning_effort": effort} if effort else {}
            args = ["--date", "2026-12-04"] + (["--effort", effort] if effort else [])
            for tools in (None, TOOLS + [WIDE_TOOL]):
                n = 0
                for msgs in convs:
                    for gen in (True, False):
                        want = jinja_render(os.path.join(TEMPLATES, "openai-gpt-oss-120b.jinja"),
                                            msgs, gen, tools=tools, **extra)
                        got = warm_render("harmony", msgs, gen, tools=tools, extra=args)
                        self.assertEqual(got, want, f"harmony: {json.dumps(msgs)}, generation "
                                                    f"prompt {gen}, effort {effort}, tools {bool(tools)}")
                        n += 1
                self.assertEqual(n, 18)
        with self.assertRaisesRegex(ValueError, "<\\|channel\\|> tags"):
            warm_render("harmony", [U1, {"role": "assistant", "content": "<|channel|>final<|message|>4"}],
                        False, extra=["--date", "2026-12-04"])
        with self.assertRaisesRegex(ValueError, "not YYYY-MM-DD"):
            warm_render("harmony", [U1], True, extra=["--date", "4 Dec 2026"])

    def test_parse_llama31_and_harmony(self):
        def parse(family, text):
            p = subprocess.run([RENDER, family, "--parse"], input=text.encode(), capture_output=True,
                               timeout=30, check=True)
            return json.loads(p.stdout)
        got = parse("llama31", ' {"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}')
        self.assertEqual(got["tool_calls"], [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}])
        self.assertEqual(got["content"], "")
        self.assertEqual(parse("llama31", "It is {\"name\": 4}")["tool_calls"], [])
        self.assertEqual(parse("llama31", "It is 4.")["content"], "It is 4.")
        # what gpt-oss writes after <|start|>assistant, control tokens as their text
        out = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant" \
              "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" \
              '{"city": "Paris", "days": 2}<|call|>'
        got = parse("harmony", out)
        self.assertEqual(got, {"content": "", "reasoning": "Need the weather.", "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]})
        # the template's own form of a call (recipient before the channel)
        got = parse("harmony", ' to=functions.now<|channel|>commentary json<|message|>{}<|call|>')
        self.assertEqual(got["tool_calls"], [{"name": "now", "arguments": {}}])
        got = parse("harmony", "<|channel|>analysis<|message|>Add them.<|end|><|start|>assistant"
                               "<|channel|>final<|message|>4 <|end|> is <|return|>")
        # the final channel's text up to <|end|>; a header that never gets its <|message|> is dropped
        self.assertEqual(got, {"content": "4 ", "reasoning": "Add them.", "tool_calls": []})
        # the rendering of a call parses back to it
        rendered = warm_render("harmony", [U1, {"role": "assistant", "content": "",
                                                "tool_calls": [call("now", {"tz": "UTC"})]}],
                               False, extra=["--date", "2026-12-04"])
        turn = rendered.split("<|start|>assistant", 1)[1]
        self.assertEqual(parse("harmony", turn)["tool_calls"], [{"name": "now", "arguments": {"tz": "UTC"}}])

    def test_tools_gemma4(self):
        """Gemma 4 with tools: the declarations in the system turn (every schema shape the
        template writes its own way), calls with sorted arguments and Python scalars, the
        results in the same model turn named after their call (by tool_call_id, or by name),
        the answer continuing that turn, the reasoning of a call after the last user
        message, and the generation prompt's empty thought channel."""
        def c(name, args, id):
            return {"id": id, "type": "function", "function": {"name": name, "arguments": args}}
        g_call = {"role": "assistant", "content": "", "tool_calls": [c("get_weather", {
            "city": "Paris", "days": 2, "units": "C"}, "c1")]}
        g_two = {"role": "assistant", "content": "Let me look.", "reasoning_content": "Need it.",
                 "tool_calls": [c("get_weather", {"city": "Köln", "opts": {"x": [1, 2.5, None, True]}},
                                  "c2"), c("now", {}, "c3")]}
        r1 = {"role": "tool", "content": "sunny, 21", "tool_call_id": "c1"}
        r2 = {"role": "tool", "content": " 12:00 ", "tool_call_id": "c3"}
        r3 = {"role": "tool", "content": "rain", "name": "get_weather"}
        convs = [[SYS, U1], [U1], [SYS, U1, g_call, r1], [SYS, U1, g_call, r1, A_DONE, U2],
                 [U1, g_two, r3, r2], [U1, g_two, r3, r2, A_DONE], [U1, g_call],
                 [SYS, U1, g_call, r1, A_DONE], [U1, A1_PLAIN, U2, g_two, r2, r3]]
        n = self.check("google-gemma-4-31B-it.jinja", "gemma4", convs, tools=TOOLS + [WIDE_TOOL])
        self.assertEqual(n, 18)
        # calls and results without tools in the request render the same way
        n = self.check("google-gemma-4-31B-it.jinja", "gemma4", convs[2:], tools=None)
        self.assertEqual(n, 14)

    def test_parse_gemma4(self):
        def parse(text):
            p = subprocess.run([RENDER, "gemma4", "--parse"], input=text.encode(),
                               capture_output=True, timeout=30, check=True)
            return json.loads(p.stdout)
        got = parse('Let me look.<|tool_call>call:get_weather{city:<|"|>New York, "NY"<|"|>,days:3,'
                    'opts:{x:[1,2.5,None,true],<|"|>a b<|"|>:false}}<tool_call|><|tool_call>call:now{}'
                    '<tool_call|>')
        self.assertEqual(got["content"], "Let me look.")
        self.assertEqual(got["tool_calls"], [
            {"name": "get_weather", "arguments": {"city": 'New York, "NY"', "days": 3,
                                                  "opts": {"x": [1, 2.5, None, True], "a b": False}}},
            {"name": "now", "arguments": {}}])
        self.assertEqual(parse("<|tool_call>call:now{tz:}<tool_call|>")["tool_calls"], [])
        # the rendering of a call parses back to it
        rendered = warm_render("gemma4", [U1, A_CALL_TEXT], False)
        turn = rendered.split("<|turn>model\n")[1]
        self.assertEqual([x["name"] for x in parse(turn)["tool_calls"]], ["get_weather", "now"])

    def test_gemma2(self):
        convs = [[U1], [U1, A1_PLAIN, U2]]
        self.assertEqual(self.check("google-gemma-2-2b-it.jinja", "gemma", convs), 4)

    def test_detection(self):
        """Each template file's family, as warmd detects it when it loads a model
        (warm-gguf prints it for a file; here the detector runs on the template text)."""
        want = {
            "Qwen-Qwen2.5-7B-Instruct.jinja": "chatml",
            "Qwen-Qwen3-0.6B.jinja": "qwen3",
            "Qwen3.5-4B.jinja": "qwen35",
            "Qwen3-Coder.jinja": "chatml",
            "google-gemma-2-2b-it.jinja": "gemma",
            "google-gemma-4-31B-it.jinja": "gemma4",
            "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama31",
            "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama31",
            "openai-gpt-oss-120b.jinja": "harmony",
        }
        for name, fam in want.items():
            with open(os.path.join(TEMPLATES, name), "rb") as f:
                p = subprocess.run([RENDER, "--detect"], stdin=f, capture_output=True, timeout=30)
            self.assertEqual(p.stdout.decode().strip(), fam, name)


if __name__ == "__main__":
    main()
