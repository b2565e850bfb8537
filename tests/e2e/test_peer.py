"""P0-7 peer authentication with real users: a uid outside the socket group cannot
connect (EACCES); a uid in the group but outside allowed_uids is closed before a single
byte of RPC is exchanged; an allowed uid sees its own identity; admin-only RPCs need the
admin group. Needs root (useradd, setpriv); skipped otherwise."""

import os

from warmd_harness import UsersTest, main, metric, pb, write_model

TAG = f"{os.getpid() % 100000}"
SOCK_GROUP, ADMIN_GROUP = f"wtsock{TAG}", f"wtadm{TAG}"
USERS = {  # name -> supplementary groups
    f"wta{TAG}": [SOCK_GROUP],               # allowed
    f"wtb{TAG}": [SOCK_GROUP],               # can open the socket, not allowed
    f"wtc{TAG}": [],                         # cannot open the socket
    f"wtd{TAG}": [SOCK_GROUP, ADMIN_GROUP],  # allowed and admin
}

CLIENT = r'''
import json, os, socket, sys
sys.path.insert(0, sys.argv[1])
import grpc
from warm.v1 import warm_pb2 as pb, warm_pb2_grpc as pbg
path, action = sys.argv[2], sys.argv[3]
out = {"pid": os.getpid(), "uid": os.getuid(), "gid": os.getgid()}
if action == "raw":
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError as e:
        out["connect"] = e.errno
    else:
        out["connect"] = 0
        s.settimeout(10)
        try:
            data = s.recv(4096)
            out["first_bytes"] = len(data)
            out["first_hex"] = data.hex()
        except OSError as e:
            out["first_bytes"] = -e.errno
    print(json.dumps(out)); sys.exit(0)
st = pbg.WarmStub(grpc.insecure_channel("unix:" + path))
calls = {
    "info": lambda: st.GetInfo(pb.GetInfoRequest(), timeout=20),
    "load": lambda: st.LoadModel(pb.LoadModelRequest(model="nomodel"), timeout=20),
    "unload": lambda: st.UnloadModel(pb.UnloadModelRequest(model="m"), timeout=20),
    "purge_other": lambda: st.CachePurge(pb.CachePurgeRequest(namespace="uid:0"), timeout=20),
    "stats_all": lambda: st.CacheStats(pb.CacheStatsRequest(namespace="*"), timeout=20),
}
for name in action.split(","):
    try:
        r = calls[name]()
        out[name] = ["OK", {"uid": r.peer.uid, "gid": r.peer.gid, "pid": r.peer.pid,
                            "admin": r.peer.admin} if name == "info" else str(r)]
    except grpc.RpcError as e:
        out[name] = [e.code().name, e.details()]
print(json.dumps(out))
'''


class PeerTest(UsersTest):
    GROUPS = (SOCK_GROUP, ADMIN_GROUP)
    USERS = USERS
    CLIENT = CLIENT

    def setUp(self):
        super().setUp()
        a, d = f"wta{TAG}", f"wtd{TAG}"
        self.d = self.daemon(config=f"socket_group = {SOCK_GROUP}\n"
                                    f"allowed_uids = {a}, {d}\n"
                                    f"admin_group = {ADMIN_GROUP}\n")
        write_model(os.path.join(self.d.models, "m.gguf"))
        self.d.start()

    def tearDown(self):
        self.assertEqual(self.d.stop(), 0, self.d.text())
        super().tearDown()

    def as_user(self, user, action):
        return self.run_client(user, self.d.socket, action)

    def metrics(self):
        return self.d.stub().Metrics(pb.MetricsRequest()).text

    def test_socket_owner_and_mode(self):
        st = os.lstat(self.d.socket)
        self.assertEqual(st.st_mode & 0o777, 0o660)
        import grp
        self.assertEqual(st.st_gid, grp.getgrnam(SOCK_GROUP).gr_gid)

    def test_outside_socket_group(self):
        """(a) connect() itself fails with EACCES."""
        out = self.as_user(f"wtc{TAG}", "raw")
        self.assertEqual(out["connect"], 13)
        out = self.as_user(f"wtc{TAG}", "info")
        self.assertEqual(out["info"][0], "UNAVAILABLE")

    def test_not_allowed_uid(self):
        """(b) in the socket group, not allowed: closed before any RPC is read."""
        before = self.metrics()
        out = self.as_user(f"wtb{TAG}", "raw")
        self.assertEqual(out["connect"], 0)
        # No HTTP/2 preface (SETTINGS), nothing of gRPC: only a GOAWAY that says why, so a
        # client can tell the person instead of retrying.
        frame = bytes.fromhex(out["first_hex"])
        self.assertGreaterEqual(len(frame), 17, out)
        self.assertEqual(frame[3], 7, "a GOAWAY frame, not the server preface")
        self.assertEqual(int.from_bytes(frame[:3], "big"), len(frame) - 9)
        self.assertIn(b"refused by the access policy", frame[17:])
        out = self.as_user(f"wtb{TAG}", "info,load")
        self.assertEqual(out["info"][0], "UNAVAILABLE")
        self.assertEqual(out["load"][0], "UNAVAILABLE")
        after = self.metrics()
        self.assertGreaterEqual(metric(after, "warmd_connections_refused_total"),
                                metric(before, "warmd_connections_refused_total") + 2)
        for m in ("GetInfo", "LoadModel"):
            name = f'warmd_rpc_requests_total{{method="{m}"}}'
            self.assertEqual(metric(after, name), metric(before, name), "no RPC ran")
        uid = self.ids[f"wtb{TAG}"][0]
        self.assertIn(f"refused connection: uid {uid}", self.d.text())

    def test_allowed_uid_identity_and_admin(self):
        user = f"wta{TAG}"
        uid, gid = self.ids[user]
        out = self.as_user(user, "raw")
        self.assertGreater(out["first_bytes"], 0)  # HTTP/2 settings from the server
        out = self.as_user(user, "info,load,unload,purge_other,stats_all")
        self.assertEqual(out["info"][0], "OK")
        self.assertEqual(out["info"][1], {"uid": uid, "gid": gid, "pid": out["pid"],
                                          "admin": False})
        self.assertEqual(out["load"][0], "PERMISSION_DENIED")
        self.assertIn(f"uid {uid}", out["load"][1])
        self.assertEqual(out["unload"][0], "PERMISSION_DENIED")
        self.assertEqual(out["purge_other"][0], "PERMISSION_DENIED")
        self.assertEqual(out["stats_all"][0], "PERMISSION_DENIED")

    def test_admin_group(self):
        user = f"wtd{TAG}"
        out = self.as_user(user, "info,load,unload")
        self.assertTrue(out["info"][1]["admin"])
        self.assertEqual(out["load"][0], "NOT_FOUND")  # past the permission check
        self.assertEqual(out["unload"][0], "OK")


if __name__ == "__main__":
    main()
