"""`python -m tracelens` is the same as the `tracelens` command (the console script runs `main`)."""

import gc
import sys

from tracelens import early


def main() -> None:
    # Before typer and the rest are imported: a large trace's load starts now, and the
    # GC waits (tracelens.cli.main says why and turns it back on).
    gc.disable()
    early.start(sys.argv[1:])
    from tracelens.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
