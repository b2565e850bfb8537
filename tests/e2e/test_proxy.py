"""Calls on behalf of another user (trusted_proxy_uids) and bearer tokens, with real users:
a trusted proxy uid (what warm-httpd runs as) asks for a call to be served as a user, and
that user's policy, admin rights and namespace apply exactly as if they had connected;
an untrusted uid cannot; a token made on the socket stands in for a user the proxy cannot
name, survives a restart, is kept hashed, and stops working when revoked or retired.
Needs root (useradd, setpriv); skipped otherwise."""

import json
import os
import shutil
import stat
import subprocess
import time
import unittest

from warmd_harness import BIN, SHARED, UsersTest, main, pb

TAG = f"{os.getpid() % 100000}"
SOCK_GROUP, ADMIN_GROUP = f"wpsock{TAG}", f"wpadm{TAG}"
USERS = {  # name -> supplementary groups
    f"wpp{TAG}": [SOCK_GROUP],               # the trusted proxy
    f"wpa{TAG}": [SOCK_GROUP],               # allowed user
    f"wpd{TAG}": [SOCK_GROUP, ADMIN_GROUP],  # allowed admin
    f"wpb{TAG}": [],                         # outside the policy
    f"wpx{TAG}": [SOCK_GROUP],               # allowed, but not a trusted proxy
}
PROXY, USER, ADMIN, OUTSIDER, UNTRUSTED = USERS

# Runs as some uid: calls = [[name, metadata-or-null, args], ...]; prints the results.
CLIENT = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
import grpc
from warm.v1 import warm_pb2 as pb, warm_pb2_grpc as pbg
st = pbg.WarmStub(grpc.insecure_channel("unix:" + sys.argv[2]))
out = []
for name, md, arg in json.loads(sys.argv[3]):
    md = [tuple(x) for x in md] if md else None
    try:
        if name == "info":
            r = st.GetInfo(pb.GetInfoRequest(), metadata=md, timeout=30)
            out.append(["OK", {"uid": r.peer.uid, "gid": r.peer.gid, "admin": r.peer.admin,
                               "namespace": r.peer.namespace, "via_proxy": r.peer.via_proxy,
                               "proxy_uid": r.peer.proxy_uid}])
        elif name == "load":
            st.LoadModel(pb.LoadModelRequest(model="nomodel"), metadata=md, timeout=30)
            out.append(["OK", None])
        elif name == "token":
            out.append(["OK", st.CreateToken(pb.CreateTokenRequest(), metadata=md,
                                             timeout=30).token])
        elif name == "revoke":
            out.append(["OK", st.RevokeTokens(pb.RevokeTokensRequest(), metadata=md,
                                              timeout=30).revoked])
        elif name == "generate":
            text = "".join(e.token.text for e in st.Generate(
                pb.GenerateRequest(model="m", prompt=arg, max_tokens=8), metadata=md,
                timeout=120) if e.WhichOneof("event") == "token")
            out.append(["OK", text])
        elif name == "cache":
            r = st.CacheList(pb.CacheListRequest(), metadata=md, timeout=30)
            out.append(["OK", sorted({e.namespace for e in r.entries})])
    except grpc.RpcError as e:
        out.append([e.code().name, e.details()])
print(json.dumps(out))
'''


def on_behalf(uid):
    return [["warm-on-behalf-of-uid", str(uid)]]


def with_token(token):
    return [["warm-user-token", token]]


class ProxyTest(UsersTest):
    GROUPS = (SOCK_GROUP, ADMIN_GROUP)
    USERS = USERS
    CLIENT = CLIENT

    def uids(self):
        return {user: uid for user, (uid, _) in self.ids.items()}

    def start(self):
        d = self.daemon(config=f"allowed_groups = {SOCK_GROUP}\nadmin_group = {ADMIN_GROUP}\n"
                               f"trusted_proxy_uids = {PROXY}\n")
        if SHARED and os.path.exists(os.path.join(SHARED, "stories260K.gguf")):
            shutil.copy(os.path.join(SHARED, "stories260K.gguf"),
                        os.path.join(d.models, "m.gguf"))
        d.start()
        os.chmod(d.socket, 0o666)  # reachable by every test user; the policy decides
        return d

    def run_as(self, d, user, calls):
        return self.run_client(user, d.socket, json.dumps(calls), timeout=300)

    def test_represented_user_gets_their_policy_rights_and_namespace(self):
        d = self.start()
        ids = self.uids()
        r = self.run_as(d, PROXY, [["info", None, None],
                                   ["info", on_behalf(ids[USER]), None],
                                   ["info", on_behalf(ids[ADMIN]), None],
                                   ["load", on_behalf(ids[USER]), None],
                                   ["load", on_behalf(ids[ADMIN]), None],
                                   ["info", on_behalf(ids[OUTSIDER]), None],
                                   ["info", [["warm-on-behalf-of-uid", "12ab"]], None]])
        own, user, admin, user_load, admin_load, outsider, bad = r
        self.assertEqual(own[1]["uid"], ids[PROXY])
        self.assertFalse(own[1]["via_proxy"])
        self.assertEqual(user[0], "OK", user)
        self.assertEqual(user[1]["uid"], ids[USER])
        self.assertEqual(user[1]["namespace"], f"uid:{ids[USER]}")
        self.assertTrue(user[1]["via_proxy"])
        self.assertEqual(user[1]["proxy_uid"], ids[PROXY])
        self.assertFalse(user[1]["admin"])
        self.assertTrue(admin[1]["admin"], admin)  # the admin group, from the user database
        self.assertEqual(user_load[0], "PERMISSION_DENIED", user_load)
        self.assertIn(f"uid {ids[USER]} is not a member", user_load[1])
        self.assertEqual(admin_load[0], "NOT_FOUND", admin_load)  # allowed; no such model
        self.assertEqual(outsider[0], "PERMISSION_DENIED", outsider)
        self.assertIn(f"uid {ids[OUTSIDER]}", outsider[1])
        self.assertIn("allowed_uids or allowed_groups", outsider[1])
        self.assertEqual(bad[0], "INVALID_ARGUMENT", bad)
        self.assertIn("warm-on-behalf-of-uid", bad[1])

        # The same ask from an allowed uid that is not a trusted proxy is refused.
        r = self.run_as(d, UNTRUSTED, [["info", on_behalf(ids[ADMIN]), None],
                                       ["info", with_token("warm_" + "0" * 64), None],
                                       ["info", None, None]])
        self.assertEqual(r[0][0], "PERMISSION_DENIED", r)
        self.assertIn(f"uid {ids[UNTRUSTED]} may not act on behalf", r[0][1])
        self.assertIn("trusted_proxy_uids", r[0][1])
        self.assertEqual(r[1][0], "PERMISSION_DENIED", r)
        self.assertEqual(r[2][1]["uid"], ids[UNTRUSTED])  # its own calls still work

    @unittest.skipUnless(SHARED and os.path.exists(os.path.join(SHARED, "stories260K.gguf")),
                         "needs ../shared/models/stories260K.gguf")
    def test_prompt_cache_lands_in_the_represented_namespace(self):
        d = self.start()
        ids = self.uids()
        prompt = "Once upon a time there was a little cat who liked to play in the sun."
        r = self.run_as(d, PROXY, [["generate", on_behalf(ids[USER]), prompt]])
        self.assertEqual(r[0][0], "OK", r)
        ns = f"uid:{ids[USER]}"
        end = time.monotonic() + 60
        seen = []
        while time.monotonic() < end:  # the write-back is asynchronous
            seen = self.run_as(d, PROXY, [["cache", on_behalf(ids[USER]), None]])[0]
            if seen[0] == "OK" and ns in seen[1]:
                break
            time.sleep(0.2)
        self.assertEqual(seen, ["OK", [ns]])
        # Neither the proxy itself nor another user sees it.
        r = self.run_as(d, PROXY, [["cache", None, None], ["cache", on_behalf(ids[ADMIN]), None]])
        self.assertEqual(r, [["OK", []], ["OK", []]])

    def test_tokens(self):
        d = self.start()
        ids = self.uids()
        made = self.run_as(d, USER, [["token", None, None]])[0]
        self.assertEqual(made[0], "OK", made)
        token = made[1]
        self.assertRegex(token, r"^warm_[0-9a-f]{64}$")

        r = self.run_as(d, PROXY, [["info", with_token(token), None],
                                   ["token", with_token(token), None],
                                   ["info", with_token("warm_" + "1" * 64), None],
                                   ["info", with_token("garbage"), None]])
        self.assertEqual(r[0][0], "OK", r)
        self.assertEqual(r[0][1]["uid"], ids[USER])
        self.assertTrue(r[0][1]["via_proxy"])
        self.assertEqual(r[1][0], "PERMISSION_DENIED", r)  # no token begets a token
        self.assertIn("not through a proxy", r[1][1])
        for bad in r[2:]:
            self.assertEqual(bad[0], "UNAUTHENTICATED", bad)
            self.assertIn("warmctl token create", bad[1])

        # Kept hashed in the state directory, 0600, and still valid after a restart.
        path = os.path.join(d.tmp, "tokens")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        with open(path) as f:
            self.assertNotIn(token[5:], f.read())
        d.stop()
        d.start()
        os.chmod(d.socket, 0o666)
        r = self.run_as(d, PROXY, [["info", with_token(token), None]])
        self.assertEqual(r[0][1]["uid"], ids[USER], r)

        # The ninth token retires the oldest; revoking ends them all.
        more = self.run_as(d, USER, [["token", None, None]] * 8)
        self.assertTrue(all(x[0] == "OK" for x in more), more)
        r = self.run_as(d, PROXY, [["info", with_token(token), None],
                                   ["info", with_token(more[0][1]), None]])
        self.assertEqual(r[0][0], "UNAUTHENTICATED", r)
        self.assertEqual(r[1][1]["uid"], ids[USER], r)
        self.assertEqual(self.run_as(d, USER, [["revoke", None, None]]), [["OK", 8]])
        r = self.run_as(d, PROXY, [["info", with_token(x[1]), None] for x in more])
        self.assertTrue(all(x[0] == "UNAUTHENTICATED" for x in r), r)

    def test_warmctl_token_create_writes_the_users_config(self):
        d = self.start()
        home = os.path.join(self.tmp, "home")
        os.makedirs(home)
        os.chown(home, *self.ids[USER])
        env = dict(os.environ, HOME=home, WARM_SOCKET=d.socket)
        env.pop("XDG_CONFIG_HOME", None)
        p = subprocess.run(self.setpriv(USER) + [os.path.join(BIN, "warmctl"), "token", "create"],
                           capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        path = os.path.join(home, ".config", "warmd", "token")
        self.assertIn(path, p.stdout)
        st = os.stat(path)
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)
        self.assertEqual(st.st_uid, self.ids[USER][0])
        with open(path) as f:
            token = f.read().strip()
        r = self.run_as(d, PROXY, [["info", with_token(token), None]])
        self.assertEqual(r[0][1]["uid"], self.ids[USER][0], r)


if __name__ == "__main__":
    main()
