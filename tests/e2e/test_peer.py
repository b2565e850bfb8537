"""P0-7 peer authentication with real users: a uid outside the socket group cannot
connect (EACCES); a uid in the group but outside allowed_uids is closed before a single
byte of RPC is exchanged; an allowed uid sees its own identity; admin-only RPCs need the
admin group. Needs root (useradd, setpriv); skipped otherwise."""

import json
import os
import shutil
import subprocess
import sys
import unittest

from warmd_harness import PYTHON_DIR, DaemonTest, main, metric, pb, write_model

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


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("useradd") and shutil.which("setpriv"),
                     "needs root, useradd and setpriv")
class PeerTest(DaemonTest):
    @classmethod
    def setUpClass(cls):
        for g in (SOCK_GROUP, ADMIN_GROUP):
            subprocess.run(["groupdel", g], capture_output=True)
            sh("groupadd", g)
        cls.ids = {}
        for user, groups in USERS.items():
            subprocess.run(["userdel", user], capture_output=True)
            cmd = ["useradd", "-M", "-U", "-s", "/usr/sbin/nologin"]
            if groups:
                cmd += ["-G", ",".join(groups)]
            sh(*cmd, user)
            out = subprocess.run(["id", "-u", user], capture_output=True, text=True, check=True)
            gid = subprocess.run(["id", "-g", user], capture_output=True, text=True, check=True)
            cls.ids[user] = (int(out.stdout), int(gid.stdout))

    @classmethod
    def tearDownClass(cls):
        for user in USERS:
            subprocess.run(["userdel", user], capture_output=True)
        for g in (SOCK_GROUP, ADMIN_GROUP):
            subprocess.run(["groupdel", g], capture_output=True)

    def setUp(self):
        super().setUp()
        # Stubs and the client where the test users can read them.
        self.py = os.path.join(self.tmp, "py")
        shutil.copytree(PYTHON_DIR, self.py)
        self.client = os.path.join(self.tmp, "client.py")
        with open(self.client, "w") as f:
            f.write(CLIENT)
        for root, dirs, files in os.walk(self.tmp):
            for n in dirs:
                os.chmod(os.path.join(root, n), 0o755)
            for n in files:
                os.chmod(os.path.join(root, n), 0o644)
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
        uid, gid = self.ids[user]
        r = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups",
                            sys.executable, self.client, self.py, self.d.socket, action],
                           capture_output=True, text=True, timeout=120,
                           env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

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
