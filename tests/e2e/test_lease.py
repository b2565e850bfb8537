"""Keep-alive as a lease per user, with the trained stories260K model on a real daemon and
users the test represents as a trusted proxy (it runs as the daemon's own uid, as warm-httpd
acts for the user who connected): user B's keep_alive 0 (unload_after) ends B's lease only,
so the model user A keeps stays and A's next request loads nothing (it unloaded the model
for everyone before); A's own keep_alive 0 then lets it go once idle; an admin's
UnloadModel unloads at once whatever leases hold; an admin's LoadModel and the preload
list outlive another user's keep_alive 0; and 40 users' ended leases do not push out a
long one (a model keeps 32).

"Still loaded" is asserted only after the daemon provably swept with every model idle: a
model that only an ended lease holds ("sweeper") is loaded and waited out, and the sweep
that unloads it would have unloaded any other model no lease holds."""

import os
import shutil
import time

from warmd_harness import SHARED, DaemonTest, collect, grpc, main, metric, pb

C = grpc.StatusCode
MODEL = os.path.join(SHARED, "stories260K.gguf") if SHARED else ""
A, B = 60001, 60002      # no user database entries needed: the uid alone decides
MINUTE = 60 * 10**6
WAIT = 120.0  # a cap on polls, never a timing assertion


def as_user(uid):
    return [("warm-on-behalf-of-uid", str(uid))]


class LeaseTest(DaemonTest):
    def setUp(self):
        super().setUp()
        if not os.path.exists(MODEL):
            self.skipTest("stories260K.gguf not found under WARM_SHARED_MODELS")

    def start(self, config=""):
        d = self.daemon(config="threads = 1\nmax_loaded_models = 3\n" + config)
        for name in ("stories", "preloaded", "sweeper"):
            shutil.copy(MODEL, os.path.join(d.models, name + ".gguf"))
        d.start()
        self.st = d.stub()

    def gen(self, uid, model="stories", **kw):
        return collect(self.st.Generate(pb.GenerateRequest(
            model=model, prompt="Once", max_tokens=1, **kw), metadata=as_user(uid)))[2]

    def model(self, name="stories"):
        return {m.name: m for m in self.st.ListModels(pb.ListModelsRequest()).models}[name]

    def wait(self, cond, what):
        end = time.monotonic() + WAIT
        while time.monotonic() < end:
            if cond():
                return
            time.sleep(0.05)
        self.fail(what)

    def sweep(self):
        """Returns after residency_expire ran while every model was idle."""
        self.wait(lambda: metric(self.st.Metrics(pb.MetricsRequest()).text,
                                 "warmd_queue_depth") == 0, "requests still queued or running")
        s = self.gen(B, model="sweeper", unload_after=True)
        self.assertEqual(s.keep_alive_usec, 0)
        self.wait(lambda: not self.model("sweeper").loaded,
                  "sweeper, which no lease holds, was never unloaded")

    def test_keep_alive_0_ends_only_the_callers_lease(self):
        self.start()
        s = self.gen(A, keep_alive_usec=10 * MINUTE)
        self.assertGreater(s.load_usec, 0)
        self.assertEqual(s.keep_alive_usec, 10 * MINUTE)
        s = self.gen(B, unload_after=True)
        self.assertEqual(s.load_usec, 0)
        self.assertEqual(s.keep_alive_usec, 0)  # B's own lease, ended
        self.sweep()
        m = self.model()
        self.assertTrue(m.loaded, "user B's keep_alive 0 unloaded the model user A keeps")
        self.assertGreater(m.keep_alive_left_usec, 5 * MINUTE)  # A's lease
        # A's next request: no reload; 0 leaves A's lease as A set it.
        s = self.gen(A)
        self.assertEqual(s.load_usec, 0)
        self.assertEqual(s.keep_alive_usec, 10 * MINUTE)
        # A's own keep_alive 0: no lease holds any more, so it goes once idle.
        s = self.gen(A, unload_after=True)
        self.assertEqual(s.keep_alive_usec, 0)
        self.wait(lambda: not self.model().loaded, "A's keep_alive 0 never unloaded the model")

    def test_admin_unload_is_at_once(self):
        self.start()
        self.gen(A, keep_alive_usec=10 * MINUTE)
        self.assertCode(lambda: self.st.UnloadModel(pb.UnloadModelRequest(model="stories"),
                                                    metadata=as_user(B)), C.PERMISSION_DENIED)
        self.assertTrue(self.model().loaded)
        # The test's own uid is the daemon's: admin, like `warmctl unload` as root.
        r = self.st.UnloadModel(pb.UnloadModelRequest(model="stories"))
        self.assertTrue(r.was_loaded)
        self.assertFalse(self.model().loaded)  # at once, though A's lease holds
        self.assertGreater(self.gen(A).load_usec, 0)

    def test_admin_load_and_preload_outlive_a_users_keep_alive_0(self):
        # LoadModel holds the admin's own lease; the preload list holds one of its own.
        self.start("preload = preloaded\n")
        r = self.st.LoadModel(pb.LoadModelRequest(model="stories", keep_alive_usec=10 * MINUTE))
        self.assertTrue(r.model.loaded)
        self.assertEqual(self.gen(B, unload_after=True).keep_alive_usec, 0)
        self.assertEqual(self.gen(B, model="preloaded", unload_after=True).keep_alive_usec, 0)
        self.sweep()
        self.assertTrue(self.model().loaded, "a user's keep_alive 0 unloaded a model an "
                        "admin loaded")
        self.assertTrue(self.model("preloaded").loaded, "a user's keep_alive 0 unloaded a "
                        "preloaded model")
        # The admin's own keep_alive 0 ends the admin's lease.
        _, _, s = collect(self.st.Generate(pb.GenerateRequest(model="stories", prompt="Once",
                                                              max_tokens=1, unload_after=True)))
        self.assertEqual(s.keep_alive_usec, 0)
        self.wait(lambda: not self.model().loaded, "the admin's keep_alive 0 never unloaded it")

    def test_many_users_do_not_push_out_a_long_lease(self):
        self.start()
        self.gen(A, keep_alive_usec=10 * MINUTE)
        # 40 more users, each with a lease that ends at once: more than a model keeps, so
        # the ones that end soonest give up their places, never A's.
        for uid in range(61000, 61040):
            self.assertEqual(self.gen(uid, keep_alive_usec=1).keep_alive_usec, 1)
        self.sweep()
        self.assertTrue(self.model().loaded, "40 users' ended leases pushed out A's")
        self.assertEqual(self.gen(A).load_usec, 0)


if __name__ == "__main__":
    main()
