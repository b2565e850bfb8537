"""Counters never cross users (reliability P1-9, the figures side): after uid A restores a
prompt from the cache, uid B's Metrics and CacheStats show none of A's figures (B's own
namespace reads 0, and no store-wide total, other namespace, connection or RPC count is
in B's text at all); A sees its own hit; the admin (root) sees the totals and every
namespace. Then B's own request is counted for B alone. Needs root, useradd and setpriv
(skipped otherwise)."""

import json
import os
import random
import subprocess
import time

from warmd_harness import BIN, Daemon, UsersTest, main, metric, pb

TAG = str(os.getpid() % 100000)
SOCK_GROUP, SHARED_GROUP = f"wmsk{TAG}", f"wmsh{TAG}"
A, B = f"wmna{TAG}", f"wmnb{TAG}"
USERS = {A: [SOCK_GROUP, SHARED_GROUP], B: [SOCK_GROUP]}
MKMODEL = os.path.join(BIN, "warm-mkmodel")
N_VOCAB = 320
# What a non-admin's Metrics may hold besides its namespaces' rows (daemon/metrics.c).
PUBLIC = {"warmd_uptime_seconds", "warmd_models_available", "warmd_models_loaded",
          "warmd_memory_bytes"}

CLIENT = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
import grpc
from warm.v1 import warm_pb2 as pb, warm_pb2_grpc as pbg
sock, action, ns, toks = sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
st = pbg.WarmStub(grpc.insecure_channel("unix:" + sock))
try:
    if action == "gen":
        s = None
        for ev in st.Generate(pb.GenerateRequest(
                model="m", tokens=toks, max_tokens=2, sampling=pb.Sampling(temperature=0),
                cache=pb.CacheOptions(namespace=ns)), timeout=120):
            if ev.HasField("summary"):
                s = ev.summary
        out = {"ok": True, "store": s.store_tokens, "ram": s.ram_tokens,
               "eval": s.evaluated_tokens, "gen": s.generated_tokens}
    else:
        m = st.Metrics(pb.MetricsRequest(), timeout=20).text
        c = st.CacheStats(pb.CacheStatsRequest(namespace=ns), timeout=20)
        i = st.GetInfo(pb.GetInfoRequest(), timeout=20)
        out = {"ok": True, "metrics": m, "active_streams": i.active_streams,
               "stats": {k: getattr(c, k) for k in ("entries", "bytes", "hits", "misses",
                                                    "rejections", "evictions")}}
except grpc.RpcError as e:
    out = {"ok": False, "code": e.code().name, "details": e.details()}
print(json.dumps(out))
'''


def prompt(n, seed):
    rnd = random.Random(seed)
    return [rnd.randrange(3, N_VOCAB) for _ in range(n)]


def ns_metric(text, name, ns):
    return metric(text, f'warmd_namespace_{name}{{namespace="{ns}"}}')


def sample_names(text):
    """(name, labels) of every sample line."""
    out = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series = line.rsplit(" ", 1)[0]
            name, _, labels = series.partition("{")
            out.append((name, labels.rstrip("}")))
    return out


class MetricsNamespaceTest(UsersTest):
    GROUPS = (SOCK_GROUP, SHARED_GROUP)
    USERS = USERS
    CLIENT = CLIENT

    def setUp(self):
        super().setUp()
        if not os.path.exists(MKMODEL):
            self.skipTest("warm-mkmodel not built")
        self.config = (f"socket_group = {SOCK_GROUP}\nthreads = 1\nparallel = 1\n"
                       f"ctx_size = 1024\ncache_shared_namespaces = team:{SHARED_GROUP}\n")
        self.d = self.daemon(config=self.config)
        subprocess.run([MKMODEL, "--arch", "llama", "--n-embd", "128", "--n-layer", "2",
                        "--n-head", "2", "--n-head-kv", "1", "--head-dim", "64", "--n-ff", "256",
                        "--n-vocab", str(N_VOCAB), "--type", "f16", "-o",
                        os.path.join(self.d.models, "m.gguf")], check=True, capture_output=True)
        self.d.start()

    def as_user(self, user, action, ns="", tokens=()):
        out = self.run_client(user, self.d.socket, action, ns, json.dumps(list(tokens)))
        self.assertTrue(out["ok"], out)
        return out

    def wait_written(self, ns, n=2, timeout=60):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if len(self.d.stub().CacheList(pb.CacheListRequest(namespace=ns)).entries) >= n:
                return
            time.sleep(0.05)
        self.fail(f"namespace {ns}: nothing written")

    def restart(self):
        self.assertEqual(self.d.stop(), 0, self.d.text())
        self.d = Daemon(self.tmp, config=self.config)
        self.daemons.append(self.d)
        self.d.start()

    def assertOnlyOwn(self, text, allowed_ns):
        """Every sample is a public row or a row of one of allowed_ns."""
        for name, labels in sample_names(text):
            if name.startswith("warmd_namespace_"):
                self.assertIn(labels, [f'namespace="{n}"' for n in allowed_ns], name)
            else:
                self.assertIn(name, PUBLIC, f"{name}{{{labels}}} shown to a non-admin")

    def test_counters_stay_in_their_namespace(self):
        ns_a, ns_b = f"uid:{self.ids[A][0]}", f"uid:{self.ids[B][0]}"
        P = prompt(600, 21)
        out = self.as_user(A, "gen", tokens=P)
        self.assertEqual(out["store"], 0, out)
        self.wait_written(ns_a)
        # after a restart only the store holds P: A's request restores it
        self.restart()
        hit = self.as_user(A, "gen", tokens=P)
        self.assertGreaterEqual(hit["store"], len(P) - 1, hit)

        # B reads the counters: nothing of A's anywhere
        b = self.as_user(B, "read")
        self.assertEqual(b["stats"], {"entries": 0, "bytes": 0, "hits": 0, "misses": 0,
                                      "rejections": 0, "evictions": 0}, b)
        text = b["metrics"]
        self.assertNotIn(ns_a, text)
        self.assertOnlyOwn(text, [ns_b])
        for name in ("cache_hits_total", "cache_misses_total", "prompt_tokens_total",
                     "prompt_tokens_store_total", "generated_tokens_total", "requests_total"):
            self.assertEqual(ns_metric(text, name, ns_b), 0, name)
        self.assertEqual(metric(text, "warmd_models_loaded"), 1)  # public: fine to see
        self.assertEqual(b["active_streams"], 0)

        # A sees its own hit (and the shared namespace it may use, empty)
        a = self.as_user(A, "read")
        self.assertEqual((a["stats"]["hits"], a["stats"]["misses"]), (1, 0), a["stats"])
        self.assertGreater(a["stats"]["entries"], 0)
        text = a["metrics"]
        self.assertOnlyOwn(text, [ns_a, "team"])
        self.assertEqual(ns_metric(text, "cache_hits_total", ns_a), 1)
        self.assertEqual(ns_metric(text, "cache_misses_total", ns_a), 0)
        self.assertEqual(ns_metric(text, "prompt_tokens_store_total", ns_a), hit["store"])
        self.assertEqual(ns_metric(text, "prompt_tokens_total", ns_a), len(P))
        self.assertEqual(ns_metric(text, "generated_tokens_total", ns_a), hit["gen"])
        self.assertEqual(ns_metric(text, "requests_total", ns_a), 1)
        self.assertEqual(ns_metric(text, "cache_hits_total", "team"), 0)

        # the admin (root, the daemon's own uid): totals and every namespace
        st = self.d.stub()
        text = st.Metrics(pb.MetricsRequest()).text
        self.assertGreaterEqual(metric(text, "warmd_prompt_tokens_store_total"), hit["store"])
        self.assertGreaterEqual(metric(text, "warmd_cache_hits_total"), 1)
        self.assertGreaterEqual(metric(text, "warmd_connections_accepted_total"), 3)
        self.assertEqual(ns_metric(text, "prompt_tokens_store_total", ns_a), hit["store"])
        self.assertEqual(ns_metric(text, "cache_hits_total", ns_a), 1)
        self.assertEqual(ns_metric(text, "cache_hits_total", ""), 0)  # the overflow row
        self.assertEqual(metric(text, "warmd_namespaces_tracked"), 1)
        self.assertGreaterEqual(st.CacheStats(pb.CacheStatsRequest(namespace="*")).hits, 1)
        self.assertEqual(st.CacheStats(pb.CacheStatsRequest(namespace=ns_a)).hits, 1)
        self.assertEqual(st.CacheStats(pb.CacheStatsRequest(namespace=ns_b)).hits, 0)

        # B's own request (another prompt: a miss) counts for B, and only for B
        Q = prompt(300, 22)
        self.as_user(B, "gen", tokens=Q)
        b = self.as_user(B, "read")
        self.assertEqual((b["stats"]["hits"], b["stats"]["misses"]), (0, 1), b["stats"])
        text = b["metrics"]
        self.assertNotIn(ns_a, text)
        self.assertOnlyOwn(text, [ns_b])
        self.assertEqual(ns_metric(text, "prompt_tokens_total", ns_b), len(Q))
        self.assertEqual(ns_metric(text, "cache_misses_total", ns_b), 1)
        self.assertEqual(ns_metric(text, "cache_hits_total", ns_b), 0)
        a = self.as_user(A, "read")
        self.assertNotIn(ns_b, a["metrics"])
        self.assertEqual(ns_metric(a["metrics"], "prompt_tokens_total", ns_a), len(P))
        self.assertEqual(self.d.stop(), 0, self.d.text())


if __name__ == "__main__":
    main()
