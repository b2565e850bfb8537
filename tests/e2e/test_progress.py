"""What a person waiting on warmd is told (issue 17, items 11, 14, 15, 16), with the
trained stories260K model on a real daemon: Progress events before a model load and while
a long prompt is prefilled (tokens done of total, restored from the cache); keep-alive
like Ollama's (unload_after, "forever", a value above max_keep_alive capped and said);
GetInfo not counting its own call as a stream; CacheList newest first with the model's
name; and text holding a NUL byte refused with INVALID_ARGUMENT naming the field and the
offset instead of being cut there."""

import os
import shutil
import time

from warmd_harness import SHARED, DaemonTest, collect, grpc, main, pb

C = grpc.StatusCode
MODEL = os.path.join(SHARED, "stories260K.gguf") if SHARED else ""
GREEDY = pb.Sampling(temperature=0)
# About 280 tokens with stories260K's vocabulary: several prefill steps of 64.
LONG = " ".join(["Once upon a time there was a little dog named Tom."] * 20)
WAIT = 120.0  # a cap on polls, never a timing assertion


def events(stream):
    kinds = {"token": [], "progress": [], "summary": []}
    for ev in stream:
        kinds[ev.WhichOneof("event")].append(getattr(ev, ev.WhichOneof("event")))
    return kinds


class ProgressTest(DaemonTest):
    def setUp(self):
        super().setUp()
        if not os.path.exists(MODEL):
            self.skipTest("stories260K.gguf not found under WARM_SHARED_MODELS")

    def start(self, config=""):
        d = self.daemon(config="threads = 1\n" + config)
        shutil.copy(MODEL, os.path.join(d.models, "stories.gguf"))
        d.start()
        self.d = d
        return d.stub()

    def loaded(self, st):
        return {m.name: m.loaded for m in st.ListModels(pb.ListModelsRequest()).models}

    def wait_writes(self, st):
        end = time.monotonic() + WAIT
        while time.monotonic() < end:
            if "warmd_cache_write_queue 0\n" in st.Metrics(pb.MetricsRequest()).text:
                return
            time.sleep(0.05)
        self.fail("the cache writer did not drain")

    def test_progress_of_load_and_long_prefill(self):
        st = self.start()
        ev = events(st.Generate(pb.GenerateRequest(model="stories", prompt=LONG, max_tokens=2,
                                                   sampling=GREEDY, cache=pb.CacheOptions(
                                                       mode=pb.CACHE_MODE_SKIP))))
        s = ev["summary"][0]
        prog = ev["progress"]
        # The model was not loaded: one LOAD event first, before any count.
        self.assertEqual(prog[0].stage, pb.PROGRESS_STAGE_LOAD, prog)
        self.assertEqual(prog[0].prompt_tokens, 0)
        pre = [p for p in prog if p.stage == pb.PROGRESS_STAGE_PREFILL]
        self.assertGreater(s.evaluated_tokens, 64 * 3)
        # After the lookup, after each step of 64, and at the end.
        self.assertGreaterEqual(len(pre), 1 + s.evaluated_tokens // 64)
        done = [p.done_tokens for p in pre]
        self.assertEqual(done, sorted(done))
        self.assertEqual(done[-1], s.prompt_tokens)
        for p in pre:
            self.assertEqual(p.prompt_tokens, s.prompt_tokens)
            self.assertEqual(p.ram_tokens + p.store_tokens, s.ram_tokens + s.store_tokens)
        self.assertGreater(s.load_usec, 0)
        # Loaded now: no LOAD event; a short prompt has no progress at all.
        ev = events(st.Generate(pb.GenerateRequest(model="stories", prompt="Once upon a time",
                                                   max_tokens=2, sampling=GREEDY)))
        self.assertEqual(ev["progress"], [])
        self.assertEqual(ev["summary"][0].load_usec, 0)

    def test_progress_counts_restored_tokens(self):
        st = self.start()
        collect(st.Generate(pb.GenerateRequest(model="stories", prompt=LONG, max_tokens=1,
                                               sampling=GREEDY)))
        self.wait_writes(st)
        # Unloaded: nothing in RAM, so the next, longer prompt comes back from the store.
        st.UnloadModel(pb.UnloadModelRequest(model="stories"))
        longer = LONG + " " + " ".join(["Tom and Lily went to the park to play."] * 12)
        ev = events(st.Generate(pb.GenerateRequest(model="stories", prompt=longer,
                                                   max_tokens=1, sampling=GREEDY)))
        s = ev["summary"][0]
        self.assertGreater(s.store_tokens, 0, s)
        self.assertGreater(s.evaluated_tokens, 64)
        pre = [p for p in ev["progress"] if p.stage == pb.PROGRESS_STAGE_PREFILL]
        self.assertEqual(pre[0].store_tokens, s.store_tokens)
        self.assertEqual(pre[0].done_tokens, s.ram_tokens + s.store_tokens)
        self.assertEqual(pre[-1].done_tokens, s.prompt_tokens)

    def test_chat_streams_progress_too(self):
        st = self.start()
        got = []
        with self.assertRaises(grpc.RpcError) as cm:
            for ev in st.Chat(pb.ChatRequest(model="stories", messages=[
                    pb.ChatMessage(role="user", content=LONG)], max_tokens=1, sampling=GREEDY)):
                got.append(ev)
        # stories260K has no chat template: the refusal follows the LOAD event, and says
        # what to do in words (no method names).
        self.assertEqual(cm.exception.code(), C.FAILED_PRECONDITION)
        self.assertIn("complete a plain prompt instead", cm.exception.details())
        self.assertNotIn("Generate", cm.exception.details())
        self.assertEqual([ev.progress.stage for ev in got], [pb.PROGRESS_STAGE_LOAD])

    def test_keep_alive_like_ollama(self):
        st = self.start("keep_alive = 5m\nmax_keep_alive = 1h\n")
        hour = 3600 * 10**6
        # Above the cap: capped, and said in the summary and in the log.
        _, _, s = collect(st.Generate(pb.GenerateRequest(
            model="stories", prompt="Once", max_tokens=1, keep_alive_usec=2 * hour)))
        self.assertEqual(s.keep_alive_usec, hour)
        self.assertEqual(len(s.warnings), 1, s)
        self.assertIn("keep_alive 2h is more than the server's max_keep_alive (1h)", s.warnings[0])
        self.assertIn("max_keep_alive (1h)", self.d.text())
        # "Forever" (2^64 - 1): as long as the server allows, without a warning.
        _, _, s = collect(st.Generate(pb.GenerateRequest(
            model="stories", prompt="Once", max_tokens=1, keep_alive_usec=2**64 - 1)))
        self.assertEqual(s.keep_alive_usec, hour)
        self.assertEqual(list(s.warnings), [])
        # Within the cap: taken as asked.
        _, _, s = collect(st.Generate(pb.GenerateRequest(
            model="stories", prompt="Once", max_tokens=1, keep_alive_usec=90 * 10**6)))
        self.assertEqual(s.keep_alive_usec, 90 * 10**6)
        self.assertTrue(self.loaded(st)["stories"])
        # unload_after (Ollama's keep_alive 0): gone once the request is over.
        _, _, s = collect(st.Generate(pb.GenerateRequest(
            model="stories", prompt="Once", max_tokens=1, unload_after=True)))
        self.assertEqual(s.keep_alive_usec, 0)
        end = time.monotonic() + WAIT
        while self.loaded(st)["stories"] and time.monotonic() < end:
            time.sleep(0.05)
        self.assertFalse(self.loaded(st)["stories"])

    def test_unload_after_waits_for_other_users(self):
        st = self.start("keep_alive = 5m\n")
        # A long generation holds the model; a short unload_after request beside it must not
        # take the model away from it.
        long_call = st.Generate(pb.GenerateRequest(model="stories", prompt="Once", max_tokens=2000,
                                                   sampling=GREEDY))
        it = iter(long_call)
        first = next(it)
        while not first.HasField("token"):
            first = next(it)
        collect(st.Generate(pb.GenerateRequest(model="stories", prompt="Tom", max_tokens=1,
                                               unload_after=True)))
        rest = list(it)
        self.assertTrue(rest[-1].HasField("summary"))
        self.assertEqual(rest[-1].summary.stop_reason, pb.STOP_REASON_MAX_TOKENS)
        end = time.monotonic() + WAIT
        while self.loaded(st)["stories"] and time.monotonic() < end:
            time.sleep(0.05)
        self.assertFalse(self.loaded(st)["stories"])

    def test_get_info_does_not_count_itself(self):
        st = self.start()
        self.assertEqual(st.GetInfo(pb.GetInfoRequest()).active_streams, 0)

    def test_cache_list_newest_first_with_model(self):
        st = self.start()
        for prompt in ("Once upon a time there was a cat", LONG, "Tom and Lily went to the park"):
            collect(st.Generate(pb.GenerateRequest(model="stories", prompt=prompt, max_tokens=1,
                                                   sampling=GREEDY)))
            self.wait_writes(st)
            time.sleep(0.002)  # distinct last-use stamps (microseconds) between the prompts
        fp = [m.fingerprint for m in st.ListModels(pb.ListModelsRequest()).models][0]
        entries = st.CacheList(pb.CacheListRequest(limit=1000)).entries
        self.assertGreaterEqual(len(entries), 4)
        used = [e.last_used_usec for e in entries]
        self.assertEqual(used, sorted(used, reverse=True))
        for e in entries:
            self.assertEqual(e.fingerprint, fp)
            self.assertEqual(e.model, "stories")
        # The limit keeps the most recently used, not the first in key order.
        top = st.CacheList(pb.CacheListRequest(limit=2)).entries
        self.assertEqual([e.key for e in top], [e.key for e in entries[:2]])

    def test_nul_byte_refused_with_its_offset(self):
        st = self.start()
        e = self.assertCode(lambda: st.Tokenize(pb.TokenizeRequest(model="stories",
                                                                   text="Once\x00upon")),
                            C.INVALID_ARGUMENT)
        self.assertIn("text: a NUL byte at byte offset 4", e.details())
        e = self.assertCode(lambda: st.Generate(pb.GenerateRequest(
            model="stories", prompt="Tom and Lily\x00 went", max_tokens=1)), C.INVALID_ARGUMENT)
        self.assertIn("prompt: a NUL byte at byte offset 12", e.details())
        e = self.assertCode(lambda: st.Chat(pb.ChatRequest(model="stories", messages=[
            pb.ChatMessage(role="system", content="Be kind."),
            pb.ChatMessage(role="user", content="Hi\x00there")])), C.INVALID_ARGUMENT)
        self.assertIn("messages[1].content: a NUL byte at byte offset 2", e.details())
        e = self.assertCode(lambda: st.Generate(pb.GenerateRequest(
            model="stories", prompt="Once", stop=["a", "b\x00"])), C.INVALID_ARGUMENT)
        self.assertIn("stop[1]: a NUL byte at byte offset 1", e.details())
        # Nothing was cut and run: the model was never even asked.
        self.assertFalse(self.loaded(st)["stories"])
        # Without the NUL, the same text is fine.
        self.assertGreater(len(st.Tokenize(pb.TokenizeRequest(model="stories",
                                                              text="Once upon")).tokens), 0)


if __name__ == "__main__":
    main()
