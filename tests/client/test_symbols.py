"""libwarm.so exports exactly the warm_* functions that warm.h declares (nm -D), nothing
of gRPC, protobuf-c's generated warm__v1__* code or the project's other modules;
libwarm.a carries the generated code; warm.h compiles on its own as C and C++."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

LIB = os.environ.get("WARM_LIB", "")
LIB_STATIC = os.environ.get("WARM_LIB_STATIC", "")
HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client",
                      "warm.h")


def declared():
    text = open(HEADER).read()
    return set(re.findall(r"WARM_API\s[^;(]*?\b(warm_\w+)\s*\(", text))


class Symbols(unittest.TestCase):
    def setUp(self):
        if not LIB or not os.path.exists(LIB):
            self.skipTest("WARM_LIB (libwarm.so) not set or not built")
        if not shutil.which("nm"):
            self.skipTest("nm not found")

    def test_exports_only_warm(self):
        out = subprocess.run(["nm", "-D", "--defined-only", LIB], capture_output=True,
                             text=True, check=True).stdout
        names = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) != 3 or parts[1] == "A":  # A: the version node LIBWARM_0
                continue
            names.add(parts[2].split("@")[0])
        bad = sorted(n for n in names if not re.match(r"warm_[a-z]", n))
        self.assertEqual(bad, [], "symbols outside the warm_ API")
        want = declared()
        self.assertGreater(len(want), 20)
        self.assertEqual(sorted(names), sorted(want))

    def test_static_has_generated_code(self):
        if not LIB_STATIC or not os.path.exists(LIB_STATIC):
            self.skipTest("WARM_LIB_STATIC not set")
        out = subprocess.run(["nm", "--defined-only", LIB_STATIC], capture_output=True,
                             text=True, check=True).stdout
        self.assertIn("warm__v1__generate_request__descriptor", out)
        self.assertIn("warm_generate", out)

    def test_header_alone(self):
        with tempfile.TemporaryDirectory() as tmp:
            for cc, ext, std in (("cc", "c", "-std=c99"), ("c++", "cc", "-std=c++17")):
                if not shutil.which(cc):
                    continue
                src = os.path.join(tmp, "use." + ext)
                with open(src, "w") as f:
                    f.write('#include "warm.h"\nint use(void);\n'
                            "int use(void) { struct warm_error e; (void)e; "
                            "return WARM_NOT_FOUND; }\n")
                subprocess.run([cc, std, "-Wall", "-Wextra", "-Werror", "-pedantic",
                                "-fsyntax-only", "-I", os.path.dirname(HEADER), src],
                               check=True)
            # No gRPC or protobuf type in the public header.
            text = open(HEADER).read()
            self.assertNotRegex(text, r"#include\s*[<\"](grpc|protobuf)|grpc_\w+|Protobuf\w+|Warm__")


if __name__ == "__main__":
    unittest.main(verbosity=2)
