"""The secrets check shared by the compose suite's scrapers: no client
token may appear in what the daemon shows (its log, its metrics)."""

import os
from typing import List


def leaked_tokens(text: str, client_dir: str) -> List[str]:
    """The names of the token files in `client_dir` whose token appears in
    `text`."""
    leaked = []
    for name in sorted(os.listdir(client_dir)):
        if name.endswith(".token"):
            with open(os.path.join(client_dir, name)) as f:
                if f.read().strip() in text:
                    leaked.append(name)
    return leaked
