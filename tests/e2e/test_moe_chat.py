"""Mixture-of-experts models chatting end to end (issue 33): a qwen3moe model from
warm-mkmodel with the Qwen3 chat template and a gpt-oss model with harmony's control tokens
(no template: warmd speaks harmony by the architecture), each through a two-turn
`warmctl chat` session, warm-httpd's /v1/chat/completions and Ollama's /api/chat. Every
reply is non-empty and equals the greedy reply of the gRPC Chat for the same messages; the
second turn resumes from the first one's KV (its summary's cached tokens cover the first
prompt, but for the empty think block that Qwen3's generation prompt ends with when thinking
is off); gpt-oss's prompt is harmony's rendering (its token count equals that of
warm-chat-render's harmony text, the control tokens one token each), and a reply forced
into the analysis and final channels (a grammar) has the analysis as reasoning, apart
from the answer (gRPC: warm-httpd has no grammar field).

Needs root and setpriv (warm-httpd runs as a uid of its own, as in tests/httpd/)."""

import datetime
import json
import os
import shutil
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "httpd"))
from warmd_harness import BIN, DaemonTest, collect, main, pb  # noqa: E402
from test_httpd import PROXY, Httpd  # noqa: E402

MKMODEL = os.path.join(BIN, "warm-mkmodel")
WARMCTL = os.path.join(BIN, "warmctl")
HTTPD = os.path.join(BIN, "warm-httpd")
RENDER = os.path.join(BIN, "warm-chat-render")
N = 10
SYSTEM = "You answer questions about the weather of small islands."
TURNS = ["What is the weather on Skye in March?", "And on Lampedusa in August?"]
COMMON = ["--n-embd", "128", "--n-layer", "2", "--n-head", "4", "--n-head-kv", "2",
          "--n-ff-exp", "64", "--ctx", "4096", "--seed", "7"]
MODELS = {"q3m": ["--arch", "qwen3moe", "--chat-template", "qwen3", "--n-ff", "128"],
          "oss": ["--arch", "gpt-oss", "--chat-template", "harmony", "--window", "32"]}
# the random weights rarely write harmony's headers: a grammar writes the shape of a
# reasoning reply (analysis, then final), the model picks the letters. The grammar matches
# text, so the headers come as text pieces, not control tokens: harmony's reader reads
# text (a control token as its text) either way.
CHANNELS = ('root ::= "<|channel|>analysis<|message|>" [a-z] [a-z] "<|end|><|start|>assistant'
            '<|channel|>final<|message|>" [a-z] [a-z]')
HARMONY = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>",
           "<|constrain|>"]


class MoeChatTest(DaemonTest):
    def setUp(self):
        super().setUp()
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv (warm-httpd runs as a uid of its own)")
        for tool in (MKMODEL, WARMCTL, HTTPD, RENDER):
            if not os.path.exists(tool):
                self.skipTest(f"{os.path.basename(tool)} is not built")
        self.d = self.daemon(config=f"threads = 2\nparallel = 1\nctx_size = 4096\n"
                                    f"allowed_uids = 0,{PROXY}\ntrusted_proxy_uids = {PROXY}\n")
        for name, args in MODELS.items():
            r = subprocess.run([MKMODEL, *args, *COMMON, "-o",
                                os.path.join(self.d.models, name + ".gguf")],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
        self.d.start()
        os.chmod(self.d.socket, 0o666)
        self.h = Httpd(self.tmp, self.d.socket)

    def tearDown(self):
        if getattr(self, "h", None):
            self.h.stop()
            self.assertNotIn("runtime error:", self.h.text())
            self.assertNotIn("AddressSanitizer", self.h.text())
        super().tearDown()

    # ---- helpers ----

    def grpc_chat(self, model, messages, think=pb.THINK_DEFAULT, fmt=None, max_tokens=N):
        """The greedy reply of the gRPC Chat: (answer, reasoning, summary)."""
        req = pb.ChatRequest(model=model, max_tokens=max_tokens, think=think,
                             sampling=pb.Sampling(temperature=0),
                             messages=[pb.ChatMessage(role=r, content=c) for r, c in messages])
        if fmt:
            req.format.grammar = fmt
        reasoning = ""
        events = list(self.d.stub().Chat(req, timeout=300))
        for ev in events:
            if ev.HasField("token"):
                reasoning += ev.token.reasoning
        _, text, summary = collect(iter(events))
        return text, reasoning, summary

    def post(self, path, body):
        req = urllib.request.Request(self.h.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            self.assertEqual(r.status, 200)
            return json.loads(r.read())

    def openai(self, model, messages, extra=None):
        return self.post("/v1/chat/completions", {
            "model": model, "max_tokens": N, "temperature": 0, **(extra or {}),
            "messages": [{"role": r, "content": c} for r, c in messages]})

    def ollama(self, model, messages, extra=None):
        return self.post("/api/chat", {
            "model": model, "stream": False, **(extra or {}),
            "options": {"temperature": 0, "num_predict": N},
            "messages": [{"role": r, "content": c} for r, c in messages]})

    def warmctl_session(self, model, args=()):
        """TURNS through one `warmctl chat`: per turn (answer, reasoning, summary)."""
        p = subprocess.Popen([WARMCTL, "--socket", self.d.socket, "chat", model, "--greedy",
                              "-n", str(N), "--json", "--system", SYSTEM, *args],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        out = []
        try:
            for text in TURNS:
                p.stdin.write(text + "\n")
                p.stdin.flush()
                answer = reasoning = ""
                for line in p.stdout:
                    ev = json.loads(line)
                    self.assertNotIn("error", ev)
                    if "summary" in ev:
                        out.append((answer, reasoning, ev["summary"]))
                        break
                    answer += ev.get("token", {}).get("text", "")
                    reasoning += ev.get("reasoning", {}).get("text", "")
                else:
                    self.fail(f"warmctl chat ended before the turn's summary: {p.stderr.read()}")
            p.stdin.close()
            p.stdout.read()
            err = p.stderr.read()
            self.assertEqual(p.wait(timeout=60), 0, err)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()
        return out

    def check_chat(self, model, think_arg, think, tail=""):
        """warmctl chat, then the same messages through gRPC, OpenAI and Ollama. tail:
        what the generation prompt has that the history's assistant turn does not."""
        turns = self.warmctl_session(model, ["--think", think_arg])
        messages = [("system", SYSTEM)]
        for t, (answer, reasoning, s) in enumerate(turns):
            messages.append(("user", TURNS[t]))
            print(f"  {model} turn {t + 1}: {s['prompt_tokens']} prompt tokens, "
                  f"{s.get('ram_tokens', 0)} from RAM, {s['evaluated_tokens']} computed: "
                  f"{answer!r}")
            self.assertTrue(answer.strip(), (model, t, s))
            g_text, g_reasoning, g_sum = self.grpc_chat(model, messages, think=think)
            self.assertEqual(answer, g_text, (model, t))
            self.assertEqual(reasoning, g_reasoning, (model, t))
            self.assertEqual(s["prompt_tokens"], g_sum.prompt_tokens)
            # OpenAI and Ollama, through warm-httpd
            effort = {"reasoning_effort": "none"} if think == pb.THINK_OFF else {}
            o = self.openai(model, messages, effort)
            self.assertEqual(o["choices"][0]["message"]["content"], answer, o)
            self.assertEqual(o["choices"][0]["message"].get("reasoning_content") or "",
                             reasoning, o)
            self.assertEqual(o["usage"]["prompt_tokens"], s["prompt_tokens"], o)
            # the same messages as gRPC's just before: every prompt token but the last is
            # in RAM
            self.assertGreaterEqual(o["usage"]["prompt_tokens_details"]["cached_tokens"],
                                    s["prompt_tokens"] - 1, o)
            ol = self.ollama(model, messages, {"think": False} if think == pb.THINK_OFF else {})
            self.assertEqual(ol["message"]["content"], answer, ol)
            self.assertEqual(ol["message"].get("thinking", ""), reasoning, ol)
            self.assertEqual(ol["prompt_eval_count"], s["prompt_tokens"], ol)
            messages.append(("assistant", answer))
        (_, _, s1), (_, _, s2) = turns
        # the second turn resumes from the first: its prompt starts with the first prompt
        # (but the generation prompt's tail), whose KV is reused; computed is only what the
        # second turn adds
        n_tail = len(self.d.stub().Tokenize(pb.TokenizeRequest(
            model=model, text=tail, parse_special=True)).tokens) if tail else 0
        cached = s2.get("ram_tokens", 0) + s2.get("store_tokens", 0)
        self.assertGreaterEqual(cached, s1["prompt_tokens"] - n_tail, (s1, s2, n_tail))
        self.assertEqual(cached + s2["evaluated_tokens"], s2["prompt_tokens"], s2)
        self.assertLessEqual(s2["evaluated_tokens"],
                             s2["prompt_tokens"] - s1["prompt_tokens"] + n_tail, (s1, s2))
        return turns

    def harmony_ids(self, msgs, effort):
        """warm-chat-render's harmony rendering (today's date, as warmd writes it) of msgs
        with the generation prompt, tokenized by warmd (control tokens parsed)."""
        today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        r = subprocess.run([RENDER, "harmony", "--generation-prompt", "--date", today,
                            "--effort", effort], input=json.dumps(msgs),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        text = r.stdout
        self.assertTrue(text.startswith("<|start|>system<|message|>"), text)
        self.assertTrue(text.endswith("<|start|>assistant"), text)
        self.assertIn(f"Reasoning: {effort}", text)
        ids = list(self.d.stub().Tokenize(pb.TokenizeRequest(model="oss", text=text,
                                                             parse_special=True)).tokens)
        return text, ids

    # ---- tests ----

    def test_qwen3moe_chat(self):
        # thinking off: the random weights would think past max_tokens, leaving no
        # answer; the generation prompt then ends with an empty think block, which the
        # history's assistant turn leaves out
        self.check_chat("q3m", "off", pb.THINK_OFF, tail="<think>\n\n</think>\n\n")

    def test_gptoss_chat(self):
        turns = self.check_chat("oss", "medium", pb.THINK_MEDIUM)
        # the prompt is harmony's rendering, its control tokens one token each
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TURNS[0]},
                {"role": "assistant", "content": turns[0][0]},
                {"role": "user", "content": TURNS[1]}]
        for t, n in ((0, 2), (1, 4)):
            text, ids = self.harmony_ids(msgs[:n], "medium")
            self.assertEqual(len(ids), turns[t][2]["prompt_tokens"], (t, text))
            specials = {s: list(self.d.stub().Tokenize(pb.TokenizeRequest(
                model="oss", text=s, parse_special=True)).tokens) for s in HARMONY}
            for s, one in specials.items():
                self.assertEqual(len(one), 1, (s, one))
            self.assertEqual(ids.count(specials["<|start|>"][0]), text.count("<|start|>"))
            self.assertEqual(ids.count(specials["<|message|>"][0]), text.count("<|message|>"))

    def test_gptoss_reasoning_apart(self):
        messages = [("system", SYSTEM), ("user", TURNS[0])]
        text, reasoning, s = self.grpc_chat("oss", messages, think=pb.THINK_LOW, fmt=CHANNELS,
                                            max_tokens=200)
        print(f"  oss forced channels: reasoning {reasoning!r}, answer {text!r}, "
              f"{s.generated_tokens} tokens")
        # the analysis channel's two letters are the reasoning, the final channel's the
        # answer; no header reaches either; the grammar's end ends the reply
        self.assertRegex(reasoning, r"^[a-z]{2}$")
        self.assertRegex(text, r"^[a-z]{2}$")
        self.assertEqual(s.stop_reason, pb.STOP_REASON_EOS, s)
        # the prompt is harmony's rendering with effort low
        _, ids = self.harmony_ids([{"role": r, "content": c} for r, c in messages], "low")
        self.assertEqual(s.prompt_tokens, len(ids))

if __name__ == "__main__":
    main()
