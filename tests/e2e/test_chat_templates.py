"""Chat families against the official templates: the conversation warmd renders with its
built-in family (warm-chat-render, engine/chat.h) equals, byte for byte, the publisher's
Jinja template (../shared/models/templates/) rendered by python3-jinja2 the way Hugging Face
does. Qwen2.5 (chatml), Qwen3 (thinking: reasoning of turns before the last user message
dropped, enable_thinking false) and Qwen3.5 (trimmed contents, the think block opened by the
generation prompt), Gemma 2; and every template file detected as its family. No daemon."""

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


def jinja_render(path, messages, add_generation_prompt, enable_thinking=None, tools=None):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                             extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(msg):
        raise ValueError(msg)

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: "04 Dec 2026"
    env.filters["tojson"] = lambda x, indent=None, **kw: json.dumps(x, indent=indent, ensure_ascii=False)
    with open(path, encoding="utf-8") as f:
        tmpl = env.from_string(f.read())
    extra = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    return tmpl.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                       bos_token="<bos>", eos_token="<eos>", **extra)


def warm_render(family, messages, add_generation_prompt, no_thinking=False, tools=None):
    args = [RENDER, family] + (["--generation-prompt"] if add_generation_prompt else []) \
        + (["--no-thinking"] if no_thinking else [])
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

    def check(self, template, family, conversations, thinking=(None,), tools=None):
        n = 0
        for msgs in conversations:
            for gen in (True, False):
                for think in thinking:
                    try:
                        want = jinja_render(os.path.join(TEMPLATES, template), msgs, gen, think, tools)
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
        self.assertEqual(got, {"content": "", "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "New York", "days": 3, "opts": {"a": [1]}}}]})
        # broken JSON stays text; a family without tools finds none
        self.assertEqual(parse("qwen3", "<tool_call>\n{\"name\": </tool_call>")["tool_calls"], [])
        self.assertEqual(parse("gemma", hermes)["tool_calls"], [])
        # the rendering of a call parses back to it (the prompt and the parser agree)
        rendered = warm_render("qwen35", [U1, A_CALL_TEXT], False)
        turn = rendered.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
        self.assertEqual([c["name"] for c in parse("qwen35", turn)["tool_calls"]], ["get_weather", "now"])

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
            "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3",
            "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3",
        }
        for name, fam in want.items():
            with open(os.path.join(TEMPLATES, name), "rb") as f:
                p = subprocess.run([RENDER, "--detect"], stdin=f, capture_output=True, timeout=30)
            self.assertEqual(p.stdout.decode().strip(), fam, name)


if __name__ == "__main__":
    main()
