"""The error reference: every exception in ``ledger.__all__``, from the classes.

For each: where it is defined, what it derives from, the first line of its
docstring, the CLI's exit code for it and the ``session_history`` error code
it becomes, then its full docstring through mkdocstrings.
"""

from __future__ import annotations

import inspect

import ledger
from ledger.core.errors import InvalidRoot, InvalidWorkspace, LedgerError


def error_classes() -> list[type[BaseException]]:
    """Every exception class ``ledger`` exports, root first, then by name."""
    found = [getattr(ledger, name) for name in ledger.__all__]
    classes = [c for c in found if inspect.isclass(c) and issubclass(c, BaseException)]
    return sorted(classes, key=lambda c: (c is not LedgerError, c.__name__))


def _first_line(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _exit_code(cls: type) -> str:
    return "2" if issubclass(cls, (InvalidWorkspace, InvalidRoot)) else "1"


def _tool_code(cls: type) -> str:
    from ledger.transcript.retrieval.results import error_code

    try:
        code = error_code(cls.__new__(cls))  # type: ignore[call-overload]
    except TypeError:
        return ""
    return f"`{code}`" if code else ""


def _bases(cls: type) -> str:
    return ", ".join(f"`{b.__name__}`" for b in cls.__bases__ if b is not object)


def render() -> str:
    classes = error_classes()
    out = ["| error | derives from | what it means | CLI exit | `session_history` |",
           "|---|---|---|---|---|"]
    for cls in classes:
        text = _first_line(cls).replace("|", "\\|")
        out.append(f"| [`{cls.__name__}`](#{cls.__module__}.{cls.__name__}) | {_bases(cls)} "
                   f"| {text} | {_exit_code(cls)} | {_tool_code(cls)} |")
    out += ["", "## Each error", ""]
    for cls in classes:
        out += [f"::: {cls.__module__}.{cls.__name__}",
                "    options:",
                "      heading_level: 3",
                "      show_bases: true",
                "      members: false",
                ""]
    return "\n".join(out) + "\n"
