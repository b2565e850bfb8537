"""Prompt-cache namespaces with real users (reliability P1-9): uid B sending uid A's prompt
gets neither a store hit nor a RAM hit; a shared namespace from cache_shared_namespaces
works for members of its groups (a second member restores what the first wrote) and is
PERMISSION_DENIED for everyone else; the cache RPCs stay on one's own namespace. Needs
root, useradd and setpriv (skipped otherwise)."""

import json
import os
import random
import subprocess
import time

from warmd_harness import BIN, Daemon, UsersTest, main, pb

TAG = str(os.getpid() % 100000)
SOCK_GROUP, SHARED_GROUP = f"wcsk{TAG}", f"wcsh{TAG}"
A, B, C = f"wcna{TAG}", f"wcnb{TAG}", f"wcnc{TAG}"
USERS = {A: [SOCK_GROUP, SHARED_GROUP], B: [SOCK_GROUP], C: [SOCK_GROUP, SHARED_GROUP]}
MKMODEL = os.path.join(BIN, "warm-mkmodel")
N_VOCAB = 320

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
               "eval": s.evaluated_tokens}
    else:
        r = st.CacheList(pb.CacheListRequest(namespace=ns), timeout=20)
        out = {"ok": True, "n": len(r.entries)}
except grpc.RpcError as e:
    out = {"ok": False, "code": e.code().name, "details": e.details()}
print(json.dumps(out))
'''


def prompt(n, seed):
    rnd = random.Random(seed)
    return [rnd.randrange(3, N_VOCAB) for _ in range(n)]


class CacheNamespaceTest(UsersTest):
    GROUPS = (SOCK_GROUP, SHARED_GROUP)
    USERS = USERS
    CLIENT = CLIENT

    def setUp(self):
        super().setUp()
        if not os.path.exists(MKMODEL):
            self.skipTest("warm-mkmodel not built")
        self.config = (f"socket_group = {SOCK_GROUP}\nthreads = 1\nparallel = 1\n"
                       f"ctx_size = 1024\ncache_shared_namespaces = team:{SHARED_GROUP}; "
                       f"other:nosuchgroup{TAG}\n")
        self.d = self.daemon(config=self.config)
        subprocess.run([MKMODEL, "--arch", "llama", "--n-embd", "128", "--n-layer", "2",
                        "--n-head", "2", "--n-head-kv", "1", "--head-dim", "64", "--n-ff", "256",
                        "--n-vocab", str(N_VOCAB), "--type", "f16", "-o",
                        os.path.join(self.d.models, "m.gguf")], check=True, capture_output=True)
        self.d.start()

    def as_user(self, user, action, ns="", tokens=()):
        return self.run_client(user, self.d.socket, action, ns, json.dumps(list(tokens)))

    def wait_written(self, ns, n=2, timeout=60):
        # root is admin: it may list any namespace
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

    def test_isolation_and_shared(self):
        P = prompt(600, 11)
        out = self.as_user(A, "gen", tokens=P)
        self.assertEqual(out, {"ok": True, "store": 0, "ram": 0, "eval": len(P)})
        self.wait_written(f"uid:{self.ids[A][0]}")
        # B: the same prompt right after A (A's sequence is still in RAM), and C after a
        # restart (only the store has it): computed both times
        out = self.as_user(B, "gen", tokens=P)
        self.assertEqual(out, {"ok": True, "store": 0, "ram": 0, "eval": len(P)})
        self.restart()
        out = self.as_user(C, "gen", tokens=P)
        self.assertEqual(out, {"ok": True, "store": 0, "ram": 0, "eval": len(P)})
        # ... and A still hits its own
        out = self.as_user(A, "gen", tokens=P)
        self.assertGreaterEqual(out["store"], len(P) - 1, out)
        # B may not read or name A's namespace, nor a shared one it is not a member of
        out = self.as_user(B, "list", ns=f"uid:{self.ids[A][0]}")
        self.assertEqual(out["code"], "PERMISSION_DENIED", out)
        out = self.as_user(B, "gen", ns=f"uid:{self.ids[A][0]}", tokens=P)
        self.assertEqual(out["code"], "PERMISSION_DENIED", out)

        # the shared namespace: A writes, C (a member too) restores, B is refused
        Q = prompt(600, 12)
        out = self.as_user(A, "gen", ns="team", tokens=Q)
        self.assertEqual(out["eval"], len(Q), out)
        self.wait_written("team")
        self.restart()
        out = self.as_user(C, "gen", ns="team", tokens=Q)
        self.assertGreaterEqual(out["store"], len(Q) - 1, out)
        out = self.as_user(B, "gen", ns="team", tokens=Q)
        self.assertEqual(out["code"], "PERMISSION_DENIED", out)
        # an entry naming a group that does not exist opens the namespace to nobody
        out = self.as_user(A, "gen", ns="other", tokens=Q)
        self.assertEqual(out["code"], "PERMISSION_DENIED", out)
        # C's own namespace never saw Q
        out = self.as_user(C, "gen", tokens=Q)
        self.assertEqual((out["store"], out["ram"]), (0, 0), out)
        self.assertEqual(self.d.stop(), 0, self.d.text())


if __name__ == "__main__":
    main()
