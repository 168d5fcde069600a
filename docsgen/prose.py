"""A module's reStructuredText prose as HTML for a page, with docutils.

The on-disk format is specified in ``ledger.core.format``'s docstring, written
in reStructuredText (section titles, definition lists, literal blocks, a
table); the reference page shows it rendered, and a docstring docutils warns
about fails the site's build instead of rendering badly.
"""

from __future__ import annotations

import importlib
import inspect

_ROLES = ("class", "func", "meth", "mod", "data", "attr", "exc", "obj", "const")


def _register_sphinx_roles() -> None:
    """Sphinx's cross-reference roles, shown as Sphinx shows them: the
    target's name as code (``~`` keeps its last part)."""
    from docutils import nodes
    from docutils.parsers.rst import roles

    def role(name: str, rawtext: str, text: str, lineno: int, inliner: object,
             options: dict[str, object] | None = None,
             content: list[str] | None = None) -> tuple[list[nodes.Node], list[nodes.Node]]:
        shown = text[1:].rsplit(".", 1)[-1] if text.startswith("~") else text
        return [nodes.literal(rawtext, shown)], []

    for name in _ROLES:
        roles.register_local_role(name, role)


def module_html(module: str) -> str:
    from docutils.core import publish_parts

    _register_sphinx_roles()
    doc = inspect.getdoc(importlib.import_module(module))
    if not doc:
        raise LookupError(f"{module} has no docstring")
    parts = publish_parts(
        source=doc, writer_name="html5",
        settings_overrides={
            "report_level": 2,  # warnings and worse are reported ...
            "halt_level": 2,  # ... and stop the build
            "initial_header_level": 2,
            "doctitle_xform": False,
            "embed_stylesheet": False,
            "input_encoding": "unicode",
        })
    return '<div class="rst-prose" markdown="0">\n' + parts["body"] + "\n</div>\n"
