"""`--redact`: user paths and host names out of every output, before a report (or the
annotated trace) is attached to a public issue.

What is replaced, in this order (longest, most specific first):

- the trace's own path and its folder, and the working directory -> `<trace-dir>`, `.`
- host names: this machine's (full and short), and those the trace records
  (`host_name`/`hostname` in its metadata, Kineto's `<host>_<pid>.<time>.pt.trace.json`
  file names) -> `<host>`
- home folders, anyone's (`/home/NAME`, `/Users/NAME`, `/root`, `C:\\Users\\NAME`) -> `~`
- the folders of absolute script paths (`/srv/app/train.py` -> `…/train.py`), except
  installed packages (site-packages, dist-packages, lib/pythonX.Y), whose paths say which
  library a frame is in, not who ran it
- this user's login name wherever else it appears as a path part -> `<user>`

Text is redacted after it is rendered, so no renderer has to know; every writer (HTML,
Markdown, JSON, terminal, Perfetto) passes its text through `Redactor.text`.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
from collections.abc import Iterable, Mapping
from typing import Any

#: Home folders on Linux, macOS and Windows (also as JSON writes a backslash: `\\`).
_HOMES = re.compile(
    r"/home/[^/\s\"'<>]+|/Users/[^/\s\"'<>]+|/root(?=/|\b)|[A-Za-z]:(?:\\\\|\\)Users(?:\\\\|\\)[^\\\s\"'<>]+"
)
#: An absolute path to a Python file (a script, a user module).
_SCRIPT = re.compile(r"(?<![\w.~-])/(?:[^/\s\"'<>()|,;]+/)+([^/\s\"'<>()|,;]+\.py)\b")
#: Installed code: its path is not personal and says which library a frame belongs to.
_INSTALLED = re.compile(r"site-packages|dist-packages|/lib/python\d|/lib64/python\d")
#: Kineto's default file name: `<hostname>_<pid>.<epoch ms>.pt.trace.json[.gz]`.
_KINETO_NAME = re.compile(r"^(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*?)_\d+\.\d+\.pt\.trace\.json")
#: Host names shorter than this are not replaced as bare words ("a", "gpu"): too likely
#: to be ordinary text. Longer ones are (`twshared39868.02.pnb3.facebook.com`).
MIN_HOST_CHARS = 4
#: Top-level fields of a trace that name a host or a user (HTA's traces carry
#: "host_name" and "username" beside "traceEvents"): looked for in the first and last
#: RAW_SCAN_BYTES of the JSON, where the top-level fields are.
_RAW_FIELD = re.compile(rb'"(host_?name|hostName|host|node_?name|user_?name|userName|user)"\s*:\s*"([^"\\]{1,200})"')
RAW_SCAN_BYTES = 1 << 20
#: Metadata keys whose values are host names.
_HOST_KEYS = ("host_name", "hostname", "host", "node", "nodename")


def _hosts_in(meta: Any, depth: int = 0) -> Iterable[str]:
    """Host names in the trace's own metadata (distributedInfo and the like)."""
    if depth > 4:
        return
    if isinstance(meta, Mapping):
        for key, value in meta.items():
            if isinstance(value, str) and str(key).lower() in _HOST_KEYS:
                yield value
            else:
                yield from _hosts_in(value, depth + 1)
    elif isinstance(meta, list):
        for value in meta[:100]:
            yield from _hosts_in(value, depth + 1)


class Redactor:
    """Replaces the personal parts of paths and host names in text."""

    def __init__(
        self,
        trace_paths: Iterable[str | os.PathLike[str]] = (),
        hosts: Iterable[str] = (),
        cwd: str | None = None,
        user: str | None = None,
        users: Iterable[str] = (),
        out_dirs: Iterable[str | os.PathLike[str]] = (),
    ) -> None:
        literal: dict[str, str] = {}
        for d in out_dirs:
            folder = os.path.abspath(os.fspath(d))
            if folder not in ("", "/"):
                literal[folder] = "<out-dir>"
        for p in trace_paths:
            path = os.path.abspath(os.fspath(p))
            literal[path] = f"<trace-dir>/{os.path.basename(path)}"
            parent = os.path.dirname(path)
            if parent not in ("", "/"):
                literal[parent] = "<trace-dir>"
            name = _KINETO_NAME.match(os.path.basename(path))
            if name:
                hosts = [*hosts, name.group("host")]
        here = cwd if cwd is not None else os.getcwd()
        if here not in ("", "/"):
            literal.setdefault(here, ".")
        names = set()
        try:
            fqdn, short = socket.getfqdn(), socket.gethostname()
        except OSError:
            fqdn, short = "", ""
        for h in (*hosts, fqdn, short, short.split(".")[0]):
            if h and len(h) >= MIN_HOST_CHARS and h not in ("localhost", "localhost.localdomain"):
                names.add(h)
        # Longest first, so a full path is replaced before its folder, a FQDN before its head.
        self._literal = sorted(literal.items(), key=lambda kv: -len(kv[0]))
        self._hosts = (
            re.compile(
                "|".join(
                    rf"(?<![A-Za-z0-9-]){re.escape(h)}(?![A-Za-z0-9-])" for h in sorted(names, key=len, reverse=True)
                )
            )
            if names
            else None
        )
        try:
            login = user if user is not None else getpass.getuser()
        except (KeyError, OSError):
            login = ""
        self._user = re.compile(rf"(?<=[/\\]){re.escape(login)}(?=[/\\])") if len(login) >= 3 else None
        # User names the trace records (a harness's "username" field): replaced anywhere
        # as a whole word.
        named = sorted({u for u in users if len(u) >= MIN_HOST_CHARS}, key=len, reverse=True)
        self._users = (
            re.compile("|".join(rf"(?<![A-Za-z0-9]){re.escape(u)}(?![A-Za-z0-9])" for u in named)) if named else None
        )

    @classmethod
    def for_trace(
        cls,
        trace_paths: Iterable[str | os.PathLike[str]],
        metadata: Iterable[Any] = (),
        raw: Iterable[bytes] = (),
        out_dirs: Iterable[str | os.PathLike[str]] = (),
    ) -> Redactor:
        """For these traces: host and user names from their metadata and from the
        top-level fields of their raw JSON (`raw`, which the loader does not keep)."""
        hosts = [h for meta in metadata for h in _hosts_in(meta)]
        users: list[str] = []
        for data in raw:
            for part in (data[:RAW_SCAN_BYTES], data[-RAW_SCAN_BYTES:]):
                for key, value in _RAW_FIELD.findall(part):
                    text = value.decode("utf-8", "replace")
                    (users if key.lower().startswith(b"user") else hosts).append(text)
        return cls(trace_paths, hosts, users=users, out_dirs=out_dirs)

    def text(self, text: str) -> str:
        for old, new in self._literal:
            text = text.replace(old, new)
        if self._hosts is not None:
            text = self._hosts.sub("<host>", text)
        text = _HOMES.sub("~", text)
        text = _SCRIPT.sub(lambda m: m.group(0) if _INSTALLED.search(m.group(0)) else f"…/{m.group(1)}", text)
        if self._user is not None:
            text = self._user.sub("<user>", text)
        if self._users is not None:
            text = self._users.sub("<user>", text)
        return text

    def __call__(self, text: str) -> str:
        return self.text(text)


def no_redaction(text: str) -> str:
    return text
