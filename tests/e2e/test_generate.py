"""Generation through the daemon with the trained stories260K model (skipped without
../shared/models): greedy output equals warm-run token for token, stop strings, reuse of
the cached prefix, Tokenize/Detokenize, client cancellation, UnloadModel and SIGTERM in
the middle of a stream (the stream ends UNAVAILABLE, the daemon exits 0), keep-alive
expiry and max_loaded_models eviction."""

import os
import shutil
import signal
import subprocess
import threading
import time

from warmd_harness import BIN, SHARED, START_TIMEOUT, DaemonTest, collect, grpc, main, metric, pb

C = grpc.StatusCode
MODEL = os.path.join(SHARED, "stories260K.gguf") if SHARED else ""
GREEDY = pb.Sampling(temperature=0)


class GenerateTest(DaemonTest):
    def setUp(self):
        super().setUp()
        if not os.path.exists(MODEL):
            self.skipTest("stories260K.gguf not found under WARM_SHARED_MODELS")

    def start(self, config="", names=("stories",)):
        d = self.daemon(config="threads = 1\n" + config)
        for n in names:
            shutil.copy(MODEL, os.path.join(d.models, n + ".gguf"))
        d.start()
        return d

    def warm_run(self, prompt, steps):
        out = subprocess.run([os.path.join(BIN, "warm-run"), "-m", MODEL, "-p", prompt, "-n",
                              str(steps), "--ids", "-t", "1"], capture_output=True, text=True,
                             check=True, timeout=300).stdout.splitlines()
        get = lambda key: [int(x) for x in next(l for l in out if l.startswith(key)).split()[1:]]
        return get("prompt_ids:"), get("generated_ids:")

    def test_greedy_equals_warm_run(self):
        if not os.path.exists(os.path.join(BIN, "warm-run")):
            self.skipTest("warm-run not built")
        d = self.start()
        st = d.stub()
        for prompt, steps in [("Once upon a time", 64), ("", 40), ("Tom and Lily went", 100)]:
            want_prompt, want = self.warm_run(prompt, steps)
            # An empty text prompt is INVALID_ARGUMENT; warm-run's "" means BOS alone.
            src = dict(prompt=prompt) if prompt else dict(tokens=want_prompt)
            ids, text, s = collect(st.Generate(pb.GenerateRequest(
                model="stories", sampling=GREEDY, max_tokens=steps - len(want_prompt) + 1,
                **src)))
            self.assertEqual(ids, want, prompt)
            self.assertEqual(s.prompt_tokens, len(want_prompt))
            self.assertEqual(s.generated_tokens, len(want))
            self.assertEqual(s.stop_reason, pb.STOP_REASON_MAX_TOKENS)
            self.assertEqual(s.ram_tokens + s.store_tokens + s.evaluated_tokens, s.prompt_tokens)
            # The same ids as a token prompt give the same output.
            ids2, text2, _ = collect(st.Generate(pb.GenerateRequest(
                model="stories", tokens=want_prompt, sampling=GREEDY, max_tokens=len(want))))
            self.assertEqual(ids2, want)
            self.assertEqual(text2, text)
            # Detokenize treats the ids as the start of a text: the SPM dummy-prefix space
            # of the first piece goes (the stream kept it: it follows the prompt).
            self.assertEqual(st.Detokenize(pb.DetokenizeRequest(model="stories", tokens=ids)).text,
                             (text[1:] if text.startswith(" ") else text).encode())
        self.assertEqual(d.stop(), 0)

    def test_prefix_reuse_stop_and_sampling(self):
        d = self.start()
        st = d.stub()
        req = dict(model="stories", prompt="Once upon a time", sampling=GREEDY, max_tokens=30)
        ids, text, s = collect(st.Generate(pb.GenerateRequest(**req)))
        self.assertIn(" little", text)
        _, _, s2 = collect(st.Generate(pb.GenerateRequest(**req)))
        self.assertEqual(s2.ram_tokens, s.prompt_tokens - 1)  # all but the last prompt token
        self.assertEqual(s2.evaluated_tokens, 1)
        # A stop string: the text ends right before it, and it is reported.
        _, stext, s3 = collect(st.Generate(pb.GenerateRequest(stop=["little", "zzz"], **req)))
        self.assertEqual(stext, text[:text.index("little")])
        self.assertEqual(s3.stop_reason, pb.STOP_REASON_STOP_STRING)
        self.assertEqual(s3.stop_string, "little")
        # Seeded sampling is reproducible; the seed is reported.
        sp = pb.Sampling(temperature=1.0, top_k=40, top_p=0.9, seed=1234)
        r = dict(model="stories", prompt="Once upon a time", sampling=sp, max_tokens=40)
        a = collect(st.Generate(pb.GenerateRequest(**r)))
        b = collect(st.Generate(pb.GenerateRequest(**r)))
        self.assertEqual(a[0], b[0])
        self.assertEqual(a[2].seed, 1234)
        # Default sampling picks a random seed and reports it.
        self.assertNotEqual(collect(st.Generate(pb.GenerateRequest(
            model="stories", prompt="Hi", max_tokens=3)))[2].seed, 0)
        # Tokenize, and ids out of the vocabulary.
        toks = st.Tokenize(pb.TokenizeRequest(model="stories", text="Once upon a time",
                                              add_special=True)).tokens
        self.assertEqual(list(toks), [1, 403, 407, 261, 378])
        self.assertCode(lambda: st.Detokenize(pb.DetokenizeRequest(model="stories", tokens=[512])),
                        C.INVALID_ARGUMENT, "out of range")
        self.assertCode(lambda: collect(st.Generate(pb.GenerateRequest(
            model="stories", tokens=[1, 600], sampling=GREEDY))), C.INVALID_ARGUMENT, "tokens[1]")
        text = st.Metrics(pb.MetricsRequest()).text
        self.assertGreater(metric(text, "warmd_generated_tokens_total"), 100)
        self.assertGreater(metric(text, "warmd_prompt_tokens_ram_total"), 0)
        self.assertEqual(metric(text, "warmd_models_loaded"), 1)
        self.assertEqual(d.stop(), 0)

    def test_concurrent_streams_equal_solo(self):
        """Continuous batching: 16 concurrent streams on one model (8 decoded together, the
        rest joining as others finish) each give exactly the tokens they get alone (every
        sequence attends only to its own cache)."""
        d = self.start(config="parallel = 8\n")
        st = d.stub()
        prompts = ["Once upon a time", "Tom had a dog", "The sun was",
                   "Lily and Ben went to the park to play", "One day, a little bird",
                   "There was a big red ball", "Mom said", "The cat sat on"]
        req = lambda p: pb.GenerateRequest(model="stories", prompt=p, max_tokens=80,
                                           sampling=GREEDY)
        solo = {p: collect(st.Generate(req(p)))[0] for p in prompts}
        streams = prompts * 2
        together = [None] * len(streams)

        def run(i):
            together[i] = collect(d.stub().Generate(req(streams[i])))
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(streams))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(streams), 16)
        for i, p in enumerate(streams):
            self.assertIsNotNone(together[i], p)
            self.assertEqual(together[i][0], solo[p], p)
            s = together[i][2]
            self.assertEqual(s.ram_tokens + s.evaluated_tokens, s.prompt_tokens)
        self.assertEqual(d.stop(), 0)

    # Greedy from BOS runs without an end token until the context is full. LONG gives
    # stories260K (trained for 512) 16384 positions, seconds of generation: at its own 512
    # a stream ends ~0.1 s after its first token, which a busy machine can let pass before
    # the test cancels, unloads or queues behind it.
    LONG = "ctx_size = 16384\nctx_above_trained = yes\n"

    def long_stream(self, st):
        return st.Generate(pb.GenerateRequest(model="stories", tokens=[1], sampling=GREEDY))

    def first_token(self, it):
        """Reads it up to its first token. (A model still loading sends a progress event
        first, and an unload that lands then is followed by a fresh load for the stream.)"""
        for ev in it:
            if ev.HasField("token"):
                return ev
        self.fail("the stream ended before its first token")

    def test_cancel_unload_and_sigterm_mid_stream(self):
        d = self.start(config=self.LONG)
        st = d.stub()
        st.LoadModel(pb.LoadModelRequest(model="stories"))
        # The client cancels: the daemon stops generating and keeps serving.
        it = self.long_stream(st)
        self.first_token(it)
        it.cancel()
        self.assertEqual(len(st.ListModels(pb.ListModelsRequest()).models), 1)
        # UnloadModel while streaming: the stream ends UNAVAILABLE, cleanly.
        it = self.long_stream(st)
        self.first_token(it)
        self.assertTrue(st.UnloadModel(pb.UnloadModelRequest(model="stories")).was_loaded)
        self.assertCode(lambda: list(it), C.UNAVAILABLE, "unloaded")
        self.assertFalse(st.ListModels(pb.ListModelsRequest()).models[0].loaded)
        # SIGTERM while streaming: UNAVAILABLE for the client, exit 0 for the daemon.
        it = self.long_stream(st)
        next(it)
        result = {}

        def drain():
            try:
                list(it)
                result["code"] = C.OK
            except grpc.RpcError as e:
                result["code"] = e.code()
        t = threading.Thread(target=drain)
        t.start()
        self.assertEqual(d.stop(signal.SIGTERM), 0, d.text())
        t.join()
        self.assertEqual(result["code"], C.UNAVAILABLE)

    def test_every_cancelled_stream_ends_cancelled(self):
        """Streams on one connection, each cancelled by the client after its first token:
        each one ends CANCELLED in the daemon and none is left open. A token the daemon
        could no longer deliver used to end the stream OK with a stop-string summary (the
        model runs far ahead of the client here, so that is where most cancels land)."""
        d = self.start(config=self.LONG)
        st = d.stub()
        st.LoadModel(pb.LoadModelRequest(model="stories"))
        n = 5
        for _ in range(n):
            it = self.long_stream(st)
            self.first_token(it)
            it.cancel()
        end = time.monotonic() + 120
        while time.monotonic() < end:
            text = st.Metrics(pb.MetricsRequest()).text
            # the runner lets go of a cancelled job, and the log says so, just after its
            # stream has ended: wait for those too
            if (metric(text, 'warmd_rpc_responses_total{code="CANCELLED"}') >= n and
                    metric(text, "warmd_streams_active") == 1 and  # this Metrics call
                    metric(text, "warmd_queue_depth") == 0 and
                    d.text().count("Generate from uid 0: status 1: cancelled by the client") >= n):
                break
            time.sleep(0.05)
        self.assertEqual(metric(text, 'warmd_rpc_responses_total{code="CANCELLED"}'), n, text)
        self.assertEqual(metric(text, "warmd_streams_active"), 1, text)
        self.assertEqual(metric(text, "warmd_queue_depth"), 0)
        self.assertEqual(d.text().count("Generate from uid 0: status 1: cancelled by the client"),
                         n)

    def test_unload_with_many_streams_and_a_full_queue(self):
        """P1-7: 20 long streams on one model (parallel = 1: 16 may wait, the rest are
        refused), then UnloadModel: every stream ends cleanly, the daemon serves on."""
        # one uid here: its own share (max_queued_per_uid) as large as the whole queue
        d = self.start(config=self.LONG + "parallel = 1\nmax_queued_per_uid = 64\n")
        st = d.stub()
        st.LoadModel(pb.LoadModelRequest(model="stories"))
        codes = []
        lock = threading.Lock()

        def stream():
            try:
                list(self.long_stream(st))
                code = C.OK
            except grpc.RpcError as e:
                code = e.code()
            with lock:
                codes.append(code)
        threads = [threading.Thread(target=stream) for _ in range(20)]
        for t in threads:
            t.start()
        end = time.monotonic() + START_TIMEOUT
        while time.monotonic() < end:
            text = st.Metrics(pb.MetricsRequest()).text
            if metric(text, 'warmd_rpc_requests_total{method="Generate"}') == 20:
                break
            time.sleep(0.05)
        while time.monotonic() < end and codes.count(C.RESOURCE_EXHAUSTED) < 4:
            time.sleep(0.05)
        self.assertTrue(st.UnloadModel(pb.UnloadModelRequest(model="stories")).was_loaded)
        for t in threads:
            t.join()
        self.assertEqual(codes.count(C.RESOURCE_EXHAUSTED), 4, codes)
        self.assertEqual(codes.count(C.UNAVAILABLE), 16, codes)
        ids = collect(st.Generate(pb.GenerateRequest(model="stories", tokens=[1], max_tokens=3,
                                                     sampling=GREEDY)))[0]
        self.assertEqual(len(ids), 3)
        self.assertEqual(d.stop(), 0)

    def test_keep_alive_and_eviction(self):
        d = self.start(config="keep_alive = 300ms\nmax_loaded_models = 1\n", names=("a", "b"))
        st = d.stub()
        r = st.LoadModel(pb.LoadModelRequest(model="a"))
        self.assertTrue(r.model.loaded)
        self.assertEqual(r.model.architecture, "llama")
        self.assertEqual(len(r.model.fingerprint), 32)
        # Loading b needs a's slot: a is idle, so it is unloaded to make room.
        st.LoadModel(pb.LoadModelRequest(model="b", keep_alive_usec=3600 * 10**6))
        loaded = {m.name: m.loaded for m in st.ListModels(pb.ListModelsRequest()).models}
        self.assertEqual(loaded, {"a": False, "b": True})
        # The client asked for an hour; the server caps it at max_keep_alive (1h default).
        left = st.ListModels(pb.ListModelsRequest()).models[1].keep_alive_left_usec
        self.assertLessEqual(left, 3600 * 10**6)
        # a's keep-alive of 300 ms runs out once it is idle.
        st.LoadModel(pb.LoadModelRequest(model="a"))
        end = time.monotonic() + START_TIMEOUT
        while time.monotonic() < end:
            if not st.ListModels(pb.ListModelsRequest()).models[0].loaded:
                break
            time.sleep(0.1)
        self.assertFalse(st.ListModels(pb.ListModelsRequest()).models[0].loaded)
        text = st.Metrics(pb.MetricsRequest()).text
        self.assertGreaterEqual(metric(text, "warmd_model_unloads_total"), 2)
        self.assertEqual(d.stop(), 0)

    def test_bad_model_file(self):
        d = self.start()
        with open(os.path.join(d.models, "broken.gguf"), "wb") as f:
            f.write(open(MODEL, "rb").read()[:5000])  # truncated
        st = d.stub()
        e = self.assertCode(lambda: collect(st.Generate(pb.GenerateRequest(
            model="broken", prompt="x"))), C.FAILED_PRECONDITION, "is not available")
        self.assertIsNotNone(e)
        self.assertEqual(len(collect(st.Generate(pb.GenerateRequest(
            model="stories", prompt="x", max_tokens=2)))[0]), 2)
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    main()
