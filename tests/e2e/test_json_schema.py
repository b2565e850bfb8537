"""Constrained output through the daemon (GenerateRequest/ChatRequest.format) with the
trained stories260K model (skipped without ../shared/models): a JSON Schema's output parses
and validates (checked here by a small validator of the keywords the schemas use), greedy
twice alike and sampled with several seeds, each seed reproducible; JSON mode gives one
object, a grammar its language; Chat constrains the reply; a malformed or unsupported
schema is INVALID_ARGUMENT naming the keyword and where, before any model is loaded; the
prompt cache works as without a format."""

import json
import os
import shutil
import subprocess

from warmd_harness import BIN, SHARED, DaemonTest, collect, grpc, main, pb

C = grpc.StatusCode
MODEL = os.path.join(SHARED, "stories260K.gguf") if SHARED else ""
MKMODEL = os.path.join(BIN, "warm-mkmodel")
GREEDY = pb.Sampling(temperature=0)
PROMPT = "Once upon a time"

# Every part bounded, so a whole value fits well inside max_tokens.
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pets": {"type": "array", "items": {"enum": ["cat", "dog", "bird"]},
                 "minItems": 1, "maxItems": 3},
        "happy": {"type": "boolean"},
        "note": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 8}]},
    },
    "required": ["name", "age", "pets", "happy", "note"],
    "additionalProperties": False,
}


def check(schema, v, path="$"):
    """The errors of v under schema (the keywords used here only): [] when valid."""
    if "anyOf" in schema:
        return [] if any(not check(s, v, path) for s in schema["anyOf"]) \
            else [f"{path}: matches no anyOf member"]
    if "enum" in schema:
        return [] if v in schema["enum"] else [f"{path}: {v!r} not in enum"]
    t = schema.get("type")
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool,
             "null": type(None)}
    if t == "integer":
        if not isinstance(v, int) or isinstance(v, bool):
            return [f"{path}: {v!r} is not an integer"]
        lo, hi = schema.get("minimum", v), schema.get("maximum", v)
        return [] if lo <= v <= hi else [f"{path}: {v} outside [{lo}, {hi}]"]
    if t in kinds and not isinstance(v, kinds[t]):
        return [f"{path}: {v!r} is not {t}"]
    errors = []
    if t == "string" and not schema.get("minLength", 0) <= len(v) <= \
            schema.get("maxLength", len(v)):
        errors.append(f"{path}: length {len(v)}")
    if t == "array":
        if not schema.get("minItems", 0) <= len(v) <= schema.get("maxItems", len(v)):
            errors.append(f"{path}: {len(v)} items")
        for i, x in enumerate(v):
            errors += check(schema.get("items", {}), x, f"{path}[{i}]")
    if t == "object":
        props = schema.get("properties", {})
        errors += [f"{path}: '{k}' missing" for k in schema.get("required", []) if k not in v]
        for k, x in v.items():
            if k in props:
                errors += check(props[k], x, f"{path}.{k}")
            elif schema.get("additionalProperties", True) is False:
                errors.append(f"{path}: '{k}' not allowed")
    return errors


class JsonSchemaTest(DaemonTest):
    def setUp(self):
        super().setUp()
        if not os.path.exists(MODEL):
            self.skipTest("stories260K.gguf not found under WARM_SHARED_MODELS")

    def start(self, config=""):
        d = self.daemon(config="threads = 1\n" + config)
        shutil.copy(MODEL, os.path.join(d.models, "stories.gguf"))
        d.start()
        return d

    def gen(self, st, sampling, fmt, prompt=PROMPT, max_tokens=300, **kw):
        return collect(st.Generate(pb.GenerateRequest(
            model="stories", prompt=prompt, sampling=sampling, max_tokens=max_tokens,
            format=fmt, **kw)))

    def assertValid(self, text, summary, schema, what):
        # The mask allows end of generation only once the value is whole.
        self.assertEqual(summary.stop_reason, pb.STOP_REASON_EOS, (what, text))
        value = json.loads(text)
        self.assertEqual(check(schema, value), [], (what, text))
        return value

    def test_generate_follows_the_schema_greedy_and_sampled(self):
        d = self.start()
        st = d.stub()
        fmt = pb.OutputFormat(json_schema=json.dumps(PERSON))
        ids, text, s = self.gen(st, GREEDY, fmt)
        self.assertValid(text, s, PERSON, "greedy")
        self.assertEqual(s.generated_tokens, len(ids))
        # Greedy under a grammar is deterministic, and the prompt cache works as always.
        ids2, text2, s2 = self.gen(st, GREEDY, fmt)
        self.assertEqual((ids2, text2), (ids, text))
        self.assertEqual(s2.ram_tokens, s.prompt_tokens - 1)
        # Without the format the same prompt is free text, not this JSON.
        free = self.gen(st, GREEDY, None, max_tokens=len(ids))[1]
        self.assertNotEqual(free, text)
        outputs = set()
        for seed in (1, 2, 3, 4, 5):
            sp = pb.Sampling(temperature=1.0, top_k=0, top_p=1.0, seed=seed)
            a = self.gen(st, sp, fmt)
            self.assertValid(a[1], a[2], PERSON, f"seed {seed}")
            self.assertEqual(self.gen(st, sp, fmt)[:2], a[:2], f"seed {seed} again")
            outputs.add(a[1])
        self.assertGreater(len(outputs), 1)  # sampling still samples
        self.assertEqual(d.stop(), 0)

    def test_json_mode_grammar_and_chat(self):
        d = self.daemon(config="threads = 1\n")
        shutil.copy(MODEL, os.path.join(d.models, "stories.gguf"))
        chatty = os.path.exists(MKMODEL)
        if chatty:
            subprocess.run([MKMODEL, "--arch", "llama", "--chat-template", "chatml", "--seed",
                            "7", "-o", os.path.join(d.models, "chatty.gguf")],
                           check=True, capture_output=True, timeout=120)
        d.start()
        st = d.stub()
        # JSON mode: one object.
        obj = pb.OutputFormat(json_schema='{"type":"object"}')
        _, text, s = self.gen(st, GREEDY, obj)
        self.assertIsInstance(self.assertValid(text, s, {"type": "object"}, "json mode"), dict)
        # A grammar: its language, ended by EOS.
        yes_no = pb.OutputFormat(grammar='root ::= "yes" | "no" | "maybe"')
        for seed in (1, 2, 3):
            _, text, s = self.gen(st, pb.Sampling(temperature=1.0, seed=seed), yes_no)
            self.assertIn(text, ("yes", "no", "maybe"))
            self.assertEqual(s.stop_reason, pb.STOP_REASON_EOS)
        # Chat constrains the reply (the template's tokens around it are not).
        if chatty:
            small = {"type": "object", "properties": {"ok": {"type": "boolean"}},
                     "required": ["ok"], "additionalProperties": False}
            for sp in (GREEDY, pb.Sampling(temperature=1.0, seed=9)):
                _, text, s = collect(st.Chat(pb.ChatRequest(
                    model="chatty", messages=[pb.ChatMessage(role="user", content="Hi")],
                    sampling=sp, max_tokens=100,
                    format=pb.OutputFormat(json_schema=json.dumps(small)))))
                self.assertValid(text, s, small, "chat")
        self.assertEqual(d.stop(), 0)

    def test_stuck_grammar_ends_the_stream_with_a_clear_error(self):
        """A grammar whose next byte lies deeper than the matcher's stack bound
        (ENGINE_GRAMMAR_MAX_DEPTH): no token can continue it, after the tokens it allowed."""
        d = self.start()
        st = d.stub()
        chain = "".join(f'r{i} ::= r{i + 1} "z"\n' for i in range(1100)) + 'r1100 ::= "a"\n'
        for lead in ("", '"ab" '):
            fmt = pb.OutputFormat(grammar=f"root ::= {lead}r0\n" + chain)
            got = []

            def run():
                for ev in st.Generate(pb.GenerateRequest(model="stories", prompt=PROMPT,
                                                         max_tokens=20, format=fmt)):
                    got.append(ev)
            err = self.assertCode(run, C.FAILED_PRECONDITION, "no token of model 'stories' "
                                "continues the output in the requested format")
            toks = [ev.token.text for ev in got if ev.HasField("token")]
            text = "".join(toks)
            self.assertIn(f"output format: after {len(toks)} generated tokens", err.details())
            # what the grammar allowed was sent before the error: a prefix of "ab"
            self.assertTrue("ab".startswith(text) and bool(text) == bool(lead), text)
        # The model goes on serving (the slot was freed, the grammar with it).
        _, text, s = self.gen(st, GREEDY, pb.OutputFormat(json_schema='{"type":"boolean"}'))
        self.assertIn(text, ("true", "false"))
        self.assertEqual(d.stop(), 0)

    def test_bad_formats_are_invalid_argument_before_any_load(self):
        d = self.start()
        st = d.stub()
        zip_pattern = dict(PERSON, properties=dict(PERSON["properties"], zip={
            "type": "string", "pattern": "^[0-9]{5}$"}))
        cases = [
            (pb.OutputFormat(json_schema=json.dumps(zip_pattern)),
             "format.json_schema: unsupported keyword 'pattern' at /properties/zip"),
            (pb.OutputFormat(json_schema='{"type":"array","uniqueItems":true}'),
             "'uniqueItems'"),
            (pb.OutputFormat(json_schema='{"type": "object",'), "format.json_schema: not valid JSON"),
            (pb.OutputFormat(json_schema='{"type":"object"}' + " " * 70000),
             "format.json_schema: 70017 bytes; it must have 1..65536"),
            (pb.OutputFormat(json_schema=""), "format.json_schema: 0 bytes"),
            (pb.OutputFormat(grammar='root ::= item'), "format.grammar: grammar line 1"),
            (pb.OutputFormat(), "format: set json_schema or grammar"),
        ]
        for fmt, want in cases:
            self.assertCode(lambda: self.gen(st, GREEDY, fmt), C.INVALID_ARGUMENT, want)
            self.assertCode(lambda: collect(st.Chat(pb.ChatRequest(
                model="stories", messages=[pb.ChatMessage(role="user", content="Hi")],
                format=fmt))), C.INVALID_ARGUMENT, want)
        # Refused before the model was resolved or loaded.
        self.assertEqual([m.loaded for m in st.ListModels(pb.ListModelsRequest()).models],
                         [False])
        # The format is checked first: even for a model that does not exist.
        self.assertCode(lambda: collect(st.Generate(pb.GenerateRequest(
            model="nosuch", prompt="x", format=cases[0][0]))), C.INVALID_ARGUMENT, "'pattern'")
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    main()
