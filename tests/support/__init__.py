"""What the tests share, one definition each:

- `corpus`: the traces the tests run on (sample_traces/, ../shared/real_traces), each
  loaded, analysed and reported once per test session;
- `cli`: one way to run the `tracelens` command in a fresh process;
- `synthetic`: one builder for small Kineto traces, for the edge cases real traces lack.

Tests import from here (`from support.corpus import sample`); tests/conftest.py keeps
only pytest's hooks and fixtures.
"""
