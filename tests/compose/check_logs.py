"""Checks the compose daemon's log (docker logs, --log_format=json) on the
host: every line is one JSON object with ts, level and event, at least one
event names a tenant of the suite, and no bearer token appears anywhere.

    python3 check_logs.py LOG_FILE CLIENT_DIR

Exit status 0 when every check holds.
"""

import json
import sys

from leaks import leaked_tokens

LEVELS = {"debug", "info", "warning", "error"}


def main() -> None:
    log_file, client_dir = sys.argv[1], sys.argv[2]
    with open(log_file, encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    failures = []
    events = []
    for number, line in enumerate(lines, 1):
        try:
            event = json.loads(line)
        except ValueError:
            failures.append(f"line {number} is not JSON: {line[:200]}")
            continue
        if not isinstance(event, dict) or not {"ts", "level", "event"} <= set(
                event) or event["level"] not in LEVELS:
            failures.append(f"line {number} lacks ts/level/event: {line[:200]}")
            continue
        events.append(event)
    if not events:
        failures.append("the daemon logged nothing")
    tenants = {e.get("tenant") for e in events}
    if not tenants & {"team-a", "team-b", "ops"}:
        failures.append("no event names a tenant (team-a, team-b or ops)")
    for name in leaked_tokens("\n".join(lines), client_dir):
        failures.append(f"the token in {name} appears in the log")
    if failures:
        print("logs: FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)
    print(f"logs: {len(events)} JSON events, tenants named, no token leaked")


if __name__ == "__main__":
    main()
