"""Runs the gpustream Python client suite under pytest (the Bazel py_test's
main); extra arguments go to pytest."""

import os
import sys

import pytest

if __name__ == "__main__":
    sys.dont_write_bytecode = True
    here = os.path.dirname(os.path.abspath(__file__))
    sys.exit(pytest.main([here, "-v", "-p", "no:cacheprovider",
                          "--durations=10", *sys.argv[1:]]))
