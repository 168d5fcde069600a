"""A module's reStructuredText prose as HTML for a page, with docutils.

The on-disk format is specified in ``ledger.core.format``'s docstring, written
in reStructuredText (section titles, definition lists, literal blocks, a
table); the reference page shows it rendered, and a docstring docutils warns
about fails the site's build instead of rendering badly.
"""

from __future__ import annotations

import importlib
import inspect


def module_html(module: str) -> str:
    from docutils.core import publish_parts

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
