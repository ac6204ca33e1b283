"""`pip install ./client/python` into a fresh virtual environment (Debian's
interpreter, its system packages, no package index), then a call."""

import os
import shutil
import subprocess

import pytest

from conftest import runfile

PYTHON = "/usr/bin/python3"


def copy_tree(tmp):
    """The parts of the repository a pip install reads, laid out as in the
    repository (setup.py finds the proto at ../../proto)."""
    package = os.path.dirname(runfile("client/python/setup.py"))
    dest = tmp / "repo" / "client" / "python"
    shutil.copytree(os.path.join(package, "gpustream"), dest / "gpustream",
                    ignore=shutil.ignore_patterns("__pycache__", "*_pb2*.py"))
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(os.path.join(package, name), dest / name)
    proto = tmp / "repo" / "proto" / "gpustream" / "v1"
    proto.mkdir(parents=True)
    shutil.copy(runfile("proto/gpustream/v1/gpustream.proto"), proto)
    return dest


@pytest.mark.skipif(not os.access(PYTHON, os.X_OK),
                    reason="needs Debian's python3")
def test_pip_install_into_a_venv(tmp_path, daemon):
    source = copy_tree(tmp_path)
    venv = tmp_path / "venv"
    env = dict(os.environ, PIP_NO_CACHE_DIR="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1", HOME=str(tmp_path))
    env.pop("PYTHONPATH", None)
    subprocess.run([PYTHON, "-m", "venv", "--system-site-packages",
                    str(venv)], check=True, timeout=120, env=env)
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--no-build-isolation",
         "--no-index", str(source)],
        capture_output=True, text=True, timeout=300, env=env)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    script = (
        "import gpustream, sys\n"
        "assert gpustream.__file__.startswith(sys.prefix), \\\n"
        "    gpustream.__file__\n"
        "with gpustream.connect(sys.argv[1]) as client:\n"
        "    with client.open_session() as session:\n"
        "        buf = session.allocate(32)\n"
        "        session.default_queue.launch('samples', 'fill_u32', 1, 8,\n"
        "                                     buf, 6, 8)\n"
        "        assert buf.read() == bytes([6, 0, 0, 0]) * 8\n"
        "        assert client.server_info().server_version == \\\n"
        "            gpustream.__version__\n"
        "import importlib.metadata as metadata\n"
        "assert metadata.version('gpustream') == gpustream.__version__\n"
        "print('installed client ok')\n")
    run = subprocess.run([str(venv / "bin" / "python"), "-c", script,
                          daemon.unix_target], capture_output=True, text=True,
                         timeout=60, env=env, cwd=str(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "installed client ok" in run.stdout
