"""The libwarm C test program (test-libwarm.c), linked with the shared and with the
static library, against a real warmd with the stories260K model."""

import os
import subprocess

from client_harness import BIN, MODEL, ClientTest, main

TEST_BIN = os.environ.get("WARM_TEST_BIN", os.path.join(BIN, "..", "tests"))


class Libwarm(ClientTest):
    def run_program(self, name):
        exe = os.path.join(TEST_BIN, name)
        if not os.path.exists(exe):
            self.skipTest(f"{name} not built")
        d = self.start()
        env = dict(os.environ, WARM_SOCKET=d.socket, WARM_TEST_MODEL=MODEL)
        p = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=600)
        out = p.stdout + p.stderr
        self.assertEqual(p.returncode, 0, out)
        self.assertIn("0 failed", out)
        self.assertIn(" 0 skipped", out)
        self.assertEqual(d.stop(), 0)
        return out

    def test_shared(self):
        print(self.run_program("test-libwarm-shared"))

    def test_static(self):
        self.run_program("test-libwarm-static")


if __name__ == "__main__":
    main()
