"""Imports a module that does not exist (capture must exit 1, as python does)."""

import no_such_module_for_tracelens  # noqa: F401
