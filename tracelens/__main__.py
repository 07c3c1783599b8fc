"""`python -m tracelens` is the same as the `tracelens` command."""

import sys

from tracelens import early

if __name__ == "__main__":
    # Before typer and the rest are imported: a large trace's load starts now.
    early.start(sys.argv[1:])
    from tracelens.cli import main

    main()
