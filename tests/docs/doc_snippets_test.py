"""Every C++ and Python snippet of README.md and docs/ compiles, so the
documentation stays true to the code.

C++ (```cpp blocks): a snippet with an #include or a main() is a whole
translation unit and compiles as written; any other snippet is a fragment
and compiles as written inside a function whose parameters are the names
the guides use for objects made earlier (FRAGMENT_CONTEXT below: a client,
a session, queues, buffers...), each in its own block, so a snippet may
declare those names again. Both against the client as installed by
`bazel run //client:install` (headers, archive, pkg-config), with g++
-std=c++20 -Wall -Werror (unused names allowed): a discarded Status, a
narrowing conversion or an undeclared name fails.

Python (```python blocks, Bazel's BUILD snippets too): compiled to
bytecode, which catches syntax errors.

Usage: doc_snippets_test.py  (under Bazel: the install target and the
documents are runfiles); doc_snippets_test.py --prefix PREFIX ROOT to check
a checkout against an installed client.
"""

import os
import re
import subprocess
import sys
import tempfile

# The parameters of every C++ fragment's function: what the guides call
# `client`, `session`, `q`... Keep this list short and the names the
# documents already use.
FRAGMENT_CONTEXT = """
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "client/gpustream.h"

namespace gs = gpustream::client;

struct Coeffs {
  float a, b;
};
"""
FRAGMENT_PARAMS = (
    "absl::StatusOr<gs::Client>& client, "
    "std::unique_ptr<gs::Session>& session, "
    "gs::Queue& q, gs::Queue& other, gs::Buffer& x, gs::Buffer& y, "
    "gs::Buffer& buf, uint64_t n, const Coeffs& coeffs, "
    "std::vector<std::string>& log")

CXXFLAGS = ["-std=c++20", "-fsyntax-only", "-Wall", "-Werror",
            "-Wno-unused-variable", "-Wno-unused-but-set-variable",
            "-Wno-unused-parameter", "-Wno-unused-function"]

FENCE = re.compile(r"^```(\w+)\s*$")


def snippets(path):
    """(language, first line number, text) of each fenced block."""
    out = []
    language, start, lines = None, 0, []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if language is None:
                match = FENCE.match(line)
                if match:
                    language, start, lines = match.group(1), number + 1, []
            elif line.startswith("```"):
                out.append((language, start, "".join(lines)))
                language = None
            else:
                lines.append(line)
    return out


def documents(root):
    names = ["README.md"] + sorted(
        os.path.join("docs", n) for n in os.listdir(os.path.join(root, "docs"))
        if n.endswith(".md"))
    return [(name, os.path.join(root, name)) for name in names]


def is_whole_unit(text):
    return "#include" in text or re.search(r"\bint main\(", text)


def fragment_function(name, line, text, index):
    """One C++ fragment as a function of FRAGMENT_PARAMS, with #line so
    errors point into the document."""
    return (f"void snippet_{index}({FRAGMENT_PARAMS}) {{\n  {{\n"
            f'#line {line} "{name}"\n{text}  }}\n}}\n')


def compile_cxx(units, cflags):
    """Compiles each (label, source); the failures, with g++'s errors."""
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, unit in units:
            path = os.path.join(tmp, "snippet.cc")
            with open(path, "w", encoding="utf-8") as f:
                f.write(unit)
            run = subprocess.run(["g++"] + CXXFLAGS + cflags + [path],
                                 capture_output=True, text=True, timeout=300,
                                 check=False)
            if run.returncode != 0:
                failures.append(f"{label}: does not compile:\n{run.stderr}")
    return failures


def check(root, cflags):
    """Compiles every snippet under `root`; the failures."""
    # Whole units one by one; every fragment together in one unit (one
    # compile of the client's headers instead of one per fragment).
    units, fragments, failures = [], [], []
    counts = {"cpp": 0, "python": 0}
    for name, path in documents(root):
        for language, line, text in snippets(path):
            label = f"{name}:{line}"
            if language == "cpp":
                counts["cpp"] += 1
                if is_whole_unit(text):
                    units.append((label, f'#line {line} "{name}"\n{text}'))
                else:
                    fragments.append(
                        fragment_function(name, line, text, len(fragments)))
            elif language == "python":
                counts["python"] += 1
                try:
                    compile(text, label, "exec")
                except SyntaxError as error:
                    failures.append(f"{label}: {error}")
    if fragments:
        units.append(("the C++ fragments",
                      FRAGMENT_CONTEXT + "\n".join(fragments)))
    failures += compile_cxx(units, cflags)
    if counts["cpp"] == 0 or counts["python"] == 0:
        failures.append(f"found {counts['cpp']} C++ and {counts['python']} "
                        "Python snippets: the fence parsing is broken")
    print(f"doc_snippets_test: {counts['cpp']} C++ and {counts['python']} "
          f"Python snippets checked")
    return failures


def install(prefix):
    srcdir = os.environ["TEST_SRCDIR"]
    env = dict(os.environ, RUNFILES_DIR=srcdir)
    subprocess.run([os.path.join(srcdir, "gpustream", "client", "install"),
                    prefix], check=True, env=env, timeout=120)


def pkg_config_cflags(prefix):
    env = dict(os.environ,
               PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    out = subprocess.run(["pkg-config", "--cflags", "gpustream-client"],
                         capture_output=True, text=True, check=True, env=env)
    return out.stdout.split()


def main(argv):
    if len(argv) == 4 and argv[1] == "--prefix":
        prefix, root = argv[2], argv[3]
    else:
        prefix = os.path.join(os.environ["TEST_TMPDIR"], "prefix")
        install(prefix)
        root = os.path.join(os.environ["TEST_SRCDIR"], "gpustream")
    cflags = pkg_config_cflags(prefix) + [
        "-I" + os.path.join(prefix, "include")]
    failures = check(root, cflags)
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
