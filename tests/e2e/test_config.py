"""warmd's command line and config file: --help, --print-config, file:line errors, and
the socket it binds itself (mode 0660, the lock against a second instance, stale sockets,
refusing to replace a non-socket)."""

import os
import socket
import stat
import subprocess

from warmd_harness import WARMD, DaemonTest, main, pb


def run(*args, **kw):
    return subprocess.run([WARMD, *args], capture_output=True, text=True, timeout=60, **kw)


class ConfigTest(DaemonTest):
    def print_config(self, *args):
        r = run("--print-config", *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return dict(l.split(" = ", 1) if " = " in l else (l.rstrip(" ="), "")
                    for l in r.stdout.splitlines())

    def test_help_lists_every_key(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        keys = self.print_config("--config", "/dev/null")
        self.assertGreaterEqual(len(keys), 17)
        for key in ("socket", "models_dir", "state_dir", "threads", "ctx_size", "parallel",
                    "cache_type_k", "cache_type_v", "kv_rotation", "cache_max_bytes",
                    "keep_alive", "max_loaded_models", "memory_budget", "allowed_uids",
                    "allowed_groups", "admin_group", "log_level"):
            self.assertIn(key, keys)
        for key in keys:
            self.assertIn("--" + key.replace("_", "-") + "=", r.stdout)
        self.assertIn("(default: 4096)", r.stdout)
        self.assertIn("(default: /run/warmd.sock)", r.stdout)
        self.assertIn("warmd 0.1.0", run("--version").stdout)

    def test_print_config_precedence(self):
        conf = os.path.join(self.tmp, "a.conf")
        with open(conf, "w") as f:
            f.write("# comment\nthreads = 3\nctx_size = 2048\ncache_type_k = q8_0\n")
        keys = self.print_config("--config", conf, "--ctx-size=1024", "--keep_alive", "90s")
        self.assertEqual(keys["threads"], "3")
        self.assertEqual(keys["ctx_size"], "1024")
        self.assertEqual(keys["cache_type_k"], "q8_0")
        self.assertEqual(keys["keep_alive"], "90s")
        self.assertEqual(keys["kv_rotation"], "yes")
        env = dict(os.environ, WARM_ATTN_ROT_DISABLE="1")
        r = run("--print-config", "--config", conf, env=env)
        self.assertIn("kv_rotation = no\n", r.stdout)
        # The printed config reads back to the same config.
        again = os.path.join(self.tmp, "b.conf")
        with open(again, "w") as f:
            f.write(run("--print-config", "--config", conf).stdout)
        self.assertEqual(run("--print-config", "--config", again).stdout,
                         run("--print-config", "--config", conf).stdout)

    def test_errors_name_file_and_line(self):
        conf = os.path.join(self.tmp, "bad.conf")
        cases = [
            ("threads = 4\n\nfrobnicate = 1\n", f"{conf}:3: unknown key 'frobnicate'"),
            ("ctx_size = lots\n", f"{conf}:1: ctx_size: 'lots' is not a non-negative integer"),
            ("parallel = 0\n", f"{conf}:1: parallel: '0' out of range [1, 256]"),
            ("cache_type_v = q9\n", f"{conf}:1: cache_type_v: 'q9' is not one of"),
            ("just words\n", f"{conf}:1: expected 'key = value'"),
            ("models_dir = relative\n", f"{conf}:1: models_dir: 'relative' is not an absolute path"),
            ("allowed_uids = nobody-warmd-e2e\n", f"{conf}:1: allowed_uids: unknown user"),
            ("split = tensor\ndevices = cpu,cpux\n",
             f'{conf}:2: devices: device "cpux" in "cpu,cpux" is not cpu or cuda:N'),
            ("tensor_split = 3;1\n",
             f'{conf}:1: tensor_split: tensor split "3;1": share 0 is not a number >= 0'),
        ]
        for text, want in cases:
            with open(conf, "w") as f:
                f.write(text)
            r = run("--config", conf)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(want, r.stderr)
        r = run("--config", conf + ".missing")
        self.assertEqual(r.returncode, 2)
        self.assertIn("No such file or directory", r.stderr)
        r = run("--config", "/dev/null", "--threads=lots")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--threads: 'lots' is not a non-negative integer", r.stderr)
        r = run("--config", "/dev/null", "--no-such-key=1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown option '--no-such-key'", r.stderr)

    def test_socket_mode_and_lock(self):
        d = self.daemon().start()
        st = os.lstat(d.socket)
        self.assertTrue(stat.S_ISSOCK(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o660)
        # A second instance refuses to steal the live socket; the first keeps serving.
        other = os.path.join(self.tmp, "other")
        os.makedirs(other)
        r = run("--config", "/dev/null", "--socket", d.socket, "--models-dir", other,
                "--state-dir", other)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("in use by another warmd", r.stderr)
        self.assertEqual(d.stub().GetInfo(pb.GetInfoRequest()).api_version, "warm.v1")
        self.assertEqual(d.stop(), 0)
        self.assertFalse(os.path.exists(d.socket), "the socket is removed at exit")

    def test_stale_socket_and_regular_file(self):
        path = os.path.join(self.tmp, "stale.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.close()  # a socket file nobody listens on
        d = self.daemon(socket_path=path).start()
        self.assertIn("removed stale socket", d.text())
        self.assertEqual(d.stop(), 0)
        path = os.path.join(self.tmp, "file.sock")
        with open(path, "w") as f:
            f.write("precious")
        r = run("--config", "/dev/null", "--socket", path, "--models-dir", self.tmp,
                "--state-dir", self.tmp)
        self.assertEqual(r.returncode, 1)
        self.assertIn("exists and is not a socket", r.stderr)
        with open(path) as f:
            self.assertEqual(f.read(), "precious")
        # A live socket of another program is not replaced either.
        live = os.path.join(self.tmp, "live.sock")
        ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ls.bind(live)
        ls.listen()
        r = run("--config", "/dev/null", "--socket", live, "--models-dir", self.tmp,
                "--state-dir", self.tmp)
        ls.close()
        self.assertEqual(r.returncode, 1)
        self.assertIn("live socket of another process", r.stderr)

    def test_cache_off_and_unavailable(self):
        d = self.daemon(config="cache_max_bytes = 0\n").start()
        st = d.stub()
        self.assertCode(lambda: st.CacheStats(pb.CacheStatsRequest()),
                        __import__("grpc").StatusCode.FAILED_PRECONDITION, "prompt cache is off")
        self.assertNotIn("store", st.GetInfo(pb.GetInfoRequest()).features)
        self.assertEqual(d.stop(), 0)
        # A state directory the store cannot use: degraded, not dead (P1-6).
        blocked = os.path.join(self.tmp, "blocked")
        with open(blocked, "w") as f:
            f.write("a file where a directory should be")
        d = self.daemon(args=["--state-dir", blocked])
        d.start()
        self.assertIn("serving without it", d.text())
        self.assertEqual(d.stub().GetInfo(pb.GetInfoRequest()).api_version, "warm.v1")
        self.assertEqual(d.stop(), 0)

    def test_missing_models_dir_still_serves(self):
        d = self.daemon()
        os.rmdir(d.models)
        d.start()
        self.assertIn("serving no models until it exists", d.text())
        self.assertEqual(len(d.stub().ListModels(pb.ListModelsRequest()).models), 0)
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    main()
