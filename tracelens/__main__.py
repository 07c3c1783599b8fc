"""`python -m tracelens` is the same as the `tracelens` command."""

import gc
import sys

from tracelens import early

if __name__ == "__main__":
    # Before typer and the rest are imported: a large trace's load starts now, and the
    # GC waits (tracelens.cli.main says why and turns it back on).
    gc.disable()
    early.start(sys.argv[1:])
    from tracelens.cli import main

    main()
