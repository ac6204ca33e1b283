"""Checks gpustreamctl against the compose daemon, from the client
container (tools/compose-test.sh runs it): health over the unix socket and
over TLS, sessions / stats / kill as JSON with the admin token while a
team-a session is open, and exit code 4 (UNAUTHENTICATED or
PERMISSION_DENIED, docs/gpustreamctl.md) for a non-admin or wrong token.

Environment: as tests/compose/test_compose.py. Exit status 0 when every
check holds; one line per check.
"""

import json
import os
import subprocess
import sys
import tempfile

import grpc

import gpustream

TCP = os.environ.get("GPUSTREAM_TCP_TARGET", "gpustreamd:50051")
UNIX = os.environ.get("GPUSTREAM_UNIX_TARGET",
                      "unix:/run/gpustream/gpustreamd.sock")
CLIENT_DIR = os.environ.get("GPUSTREAM_CLIENT_DIR", "/etc/gpustream-client")
CA = os.path.join(CLIENT_DIR, "ca.crt")
EXIT_UNAUTHORIZED = 4

failures = []


def ctl(*args: str, tenant: str = "", target: str = UNIX,
        token_file: str = "") -> subprocess.CompletedProcess:
    command = ["gpustreamctl", f"--target={target}", "--timeout=10s"]
    if not target.startswith("unix:"):
        command.append(f"--tls_ca={CA}")
    if tenant:
        token_file = os.path.join(CLIENT_DIR, f"{tenant}.token")
    if token_file:
        command.append(f"--token_file={token_file}")
    command.extend(args)
    return subprocess.run(command, capture_output=True, text=True,
                          timeout=60, check=False)


def expect(ok: bool, what: str, result: subprocess.CompletedProcess) -> None:
    print(f"ctl: {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)
        print(f"  exit {result.returncode}\n  stdout: {result.stdout.strip()}"
              f"\n  stderr: {result.stderr.strip()}")


def main() -> None:
    for target in (UNIX, TCP):
        r = ctl("health", target=target)
        expect(r.returncode == 0 and "SERVING" in r.stdout,
               f"health over {target}: SERVING, exit 0", r)

    with open(os.path.join(CLIENT_DIR, "team-a.token")) as f:
        token = f.read().strip()
    with open(CA, "rb") as f:
        ca = f.read()
    with gpustream.connect(TCP, token=token, root_certificates=ca) as client:
        session = client.open_session(client_name="ctl-probe")
        counter = session.allocate(8)
        session.default_queue.launch("samples", "add_u64", 1, 1, counter, 3)
        session.default_queue.synchronize(timeout=30)

        r = ctl("--json", "sessions", tenant="ops")
        probe = []
        if r.returncode == 0:
            probe = [s for s in json.loads(r.stdout).get("sessions", [])
                     if s.get("clientName") == "ctl-probe"]
        expect(len(probe) == 1 and probe[0].get("tenant") == "team-a",
               "sessions --json (admin) lists the open team-a session", r)

        r = ctl("--json", "stats", tenant="ops")
        completed = -1
        if r.returncode == 0:
            for t in json.loads(r.stdout).get("tenants", []):
                if t.get("tenant") == "team-a":
                    # protobuf JSON writes 64-bit integers as strings.
                    completed = int(t.get("commandsCompleted", 0))
        expect(completed > 0,
               f"stats --json (admin): team-a completed {completed} commands",
               r)

        r = ctl("sessions", tenant="team-a")
        expect(r.returncode == EXIT_UNAUTHORIZED,
               f"sessions as non-admin team-a: exit {EXIT_UNAUTHORIZED}", r)
        r = ctl("sessions", tenant="team-a", target=TCP)
        expect(r.returncode == EXIT_UNAUTHORIZED,
               f"sessions as team-a over TLS: exit {EXIT_UNAUTHORIZED}", r)
        with tempfile.NamedTemporaryFile("w", suffix=".token") as wrong:
            wrong.write("0" * 64)
            wrong.flush()
            r = ctl("sessions", token_file=wrong.name)
        expect(r.returncode == EXIT_UNAUTHORIZED,
               f"sessions with a wrong token: exit {EXIT_UNAUTHORIZED}", r)

        if probe:
            r = ctl("kill", probe[0]["publicId"], tenant="ops")
            aborted = False
            try:
                counter.read()
            except gpustream.Error as error:
                aborted = error.code == grpc.StatusCode.ABORTED
            expect(r.returncode == 0 and aborted,
                   "kill (admin) ends the session: its owner gets ABORTED", r)

    if failures:
        print(f"ctl: FAILED: {len(failures)} check(s)", file=sys.stderr)
        sys.exit(1)
    print("ctl: all checks passed")


if __name__ == "__main__":
    main()
