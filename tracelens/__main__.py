"""`python -m tracelens` is the same as the `tracelens` command."""

from tracelens.cli import main

if __name__ == "__main__":
    main()
