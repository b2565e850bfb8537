"""libwarm as a user gets it: the client directory's install rules into a temporary
prefix (libwarm.so, libwarm.a, warm.h, warm.pc, warmctl), then a program built with
`pkg-config --cflags --libs warm`, once against the shared and once against the static
library, that connects to an absent socket and prints libwarm's message."""

import os
import shutil
import subprocess
import tempfile
import unittest

BUILD = os.environ.get("WARM_BUILD_DIR", "")
# A sanitizer build's libraries need the sanitizer runtime in the program too.
SANITIZE = ["-fsanitize=address,undefined"] if os.environ.get("WARM_SANITIZE") == "1" else []

PROGRAM = r"""
#include <stdio.h>
#include <warm.h>
int main(int argc, char **argv) {
    struct warm_client *c = NULL;
    struct warm_error err;
    int r = warm_connect(argv[1], &c, &err);
    printf("%s %s: %s\n", warm_version(), warm_code_name(r), err.message);
    return r == -WARM_NOT_RUNNING ? 0 : 1;
}
"""


class Install(unittest.TestCase):
    def setUp(self):
        script = os.path.join(BUILD, "client", "cmake_install.cmake")
        if not BUILD or not os.path.exists(script):
            self.skipTest("WARM_BUILD_DIR not set")
        for tool in ("cmake", "pkg-config", "cc"):
            if not shutil.which(tool):
                self.skipTest(f"{tool} not found")
        self.tmp = tempfile.mkdtemp(prefix="warm-install-")
        self.prefix = os.path.join(self.tmp, "prefix")
        subprocess.run(["cmake", f"-DCMAKE_INSTALL_PREFIX={self.prefix}", "-P", script],
                       check=True, capture_output=True, timeout=120)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def pkg(self, *args):
        pc = [os.path.dirname(p) for p in self.find("warm.pc")]
        env = dict(os.environ, PKG_CONFIG_PATH=":".join(pc))
        return subprocess.run(["pkg-config", *args, "warm"], check=True, capture_output=True,
                              text=True, env=env).stdout.split()

    def find(self, name):
        return [os.path.join(d, name) for d, _, files in os.walk(self.prefix) if name in files]

    def test_installed_files(self):
        for name in ("warm.h", "libwarm.so", "libwarm.a", "warm.pc", "warmctl"):
            self.assertEqual(len(self.find(name)), 1, name)
        r = subprocess.run([self.find("warmctl")[0], "--version"], capture_output=True,
                           text=True, env=dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(
                               self.find("libwarm.so")[0])))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("warmctl 0.1.0", r.stdout)

    def build_and_run(self, link_args):
        src = os.path.join(self.tmp, "use.c")
        exe = os.path.join(self.tmp, "use")
        with open(src, "w") as f:
            f.write(PROGRAM)
        subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", *SANITIZE, src, "-o", exe,
                        *self.pkg("--cflags"), *link_args], check=True)
        libdir = os.path.dirname(self.find("libwarm.so")[0])
        r = subprocess.run([exe, os.path.join(self.tmp, "absent.sock")], capture_output=True,
                           text=True, env=dict(os.environ, LD_LIBRARY_PATH=libdir))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("NOT_RUNNING: warmd is not running", r.stdout)

    def test_shared(self):
        self.build_and_run(self.pkg("--libs"))

    def test_static(self):
        libs = self.pkg("--libs", "--static")
        self.build_and_run([a if a != "-lwarm" else self.find("libwarm.a")[0] for a in libs])


if __name__ == "__main__":
    unittest.main(verbosity=2)
