"""A daemon started ahead of time: `launcher.py CONFIG` pays for the interpreter, memd's imports and the tokenizer
data, then waits for a line on stdin and runs exactly what `python -m memd --config CONFIG run` runs.

The crash loop kills and restarts memd hundreds of times; interpreter start-up and the tokenizer load (about 1.5 s
of each start on a 2-vCPU machine) would otherwise be most of an iteration. The next daemon is launched while the
current one still runs, and released once it is dead (it must not take the state-dir lock before). The only
difference from a cold start is that `memd.tokens.load_encoding` remembers the encoding it already built: an
immutable tiktoken Encoding, the same object a cold start would build. An empty stdin (the run ended) exits.
"""

from __future__ import annotations

import functools
import sys


def main() -> int:
    config = sys.argv[1]
    import memd.cli
    import memd.daemon  # imported ahead, as `memd run` would import it
    from memd import tokens

    tokens.load_encoding = functools.cache(tokens.load_encoding)
    tokens.load_encoding("cl100k_base")
    if not sys.stdin.readline().strip():
        return 0
    return memd.cli.main(["--config", config, "run"])


if __name__ == "__main__":
    sys.exit(main())
