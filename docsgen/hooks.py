"""MkDocs hooks (``hooks:`` in mkdocs.yml): pages generated at build time.

- ``reference/cli-commands.md``: the CLI reference, rendered from the command
  registry (``docsgen.cli``), so it is never written twice by hand.
- ``explanation/bench/results.md`` and ``explanation/bench/plots/*.png``:
  ``bench/RESULTS.md`` and the plots ``python -m bench.files_bench --plots
  bench/plots`` renders from a run's results, served as they are in bench/.
- ``<!-- generated: NAME [ARGUMENT] -->`` in a page is replaced by what
  ``generated(NAME, ARGUMENT)`` renders from the code: a public module's API
  directive (``docsgen.api``), a module's reStructuredText prose rendered
  (``docsgen.prose``: the on-disk format), the error table (``docsgen.errors``), the
  ``session_history`` schema, arguments, bounds and error codes
  (``docsgen.tool``).
- A Sphinx role in a docstring (``:class:`~a.B```) is shown as the object's
  name in code, as Sphinx shows it.
- ``<!-- bench-results: HEADING -->`` in a page is replaced by that section of
  ``bench/RESULTS.md`` (its text up to the next heading of the same level), so a
  page shows the measured numbers without a pasted copy of them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # mkdocs loads this file by path and restores sys.path after
    sys.path.insert(0, str(REPO))

# Imported now, while REPO is on sys.path: mkdocs puts sys.path back once this
# file has run, and the hooks below run after that.
from docsgen import api, cli, errors, prose, tool  # noqa: E402

RESULTS = REPO / "bench" / "RESULTS.md"
PLOTS = REPO / "bench" / "plots"
BENCH_DIR = "explanation/bench"
MARKER = re.compile(r"<!-- bench-results: (.+?) -->")
# A Sphinx cross-reference role in a docstring (:class:`~a.b.C`), as Markdown
# renders it: the role's name, then the target as code.
# reStructuredText's "text::" before a literal block: Markdown keeps both colons.
LITERAL = re.compile(r"::(</p>\s*<div class=\"(?:language-\w+ )?highlight)")
ROLE = re.compile(r":(?:class|mod|func|data|meth|attr|exc|obj|const):<code>(~?)([^<]+)</code>")
GENERATED_MARKER = re.compile(r"<!-- generated: ([a-z-]+)(?: ([\w.]+))? -->")


def generated(name: str, argument: str | None = None) -> str:
    """What the marker ``<!-- generated: NAME [ARGUMENT] -->`` stands for."""
    if name == "api" and argument:
        return api.directive(argument)
    if name == "prose" and argument:
        return prose.module_html(argument)

    renderers = {
        "errors": errors.render,
        "tool-description": tool.description,
        "tool-schema": tool.schema,
        "tool-arguments": tool.arguments,
        "tool-limits": tool.limits,
        "tool-errors": tool.errors,
        "tool-cost": tool.cost,
    }
    if name not in renderers:
        raise LookupError(f"no generated content named {name!r}: {sorted(renderers)}")
    return renderers[name]()


def results_section(heading: str, text: str | None = None) -> str:
    """The section of bench/RESULTS.md under ``heading`` (without the heading
    line), up to the next heading of the same or a higher level."""
    text = RESULTS.read_text(encoding="utf-8") if text is None else text
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"(#+) (.*)", line)
        if m and m.group(2).strip() == heading:
            level = len(m.group(1))
            body = []
            for nxt in lines[i + 1:]:
                n = re.match(r"(#+) ", nxt)
                if n and len(n.group(1)) <= level:
                    break
                body.append(nxt)
            return "\n".join(body).strip() + "\n"
    raise LookupError(f"bench/RESULTS.md has no section {heading!r}")


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    files.append(File.generated(config, "reference/cli-commands.md", content=cli.render()))
    files.append(File.generated(config, f"{BENCH_DIR}/results.md",
                                content=RESULTS.read_text(encoding="utf-8")))
    for png in sorted(PLOTS.glob("*.png")):
        files.append(File.generated(config, f"{BENCH_DIR}/plots/{png.name}",
                                    abs_src_path=str(png)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    markdown = GENERATED_MARKER.sub(lambda m: generated(m.group(1), m.group(2)), markdown)
    return MARKER.sub(lambda m: results_section(m.group(1)), markdown)


def _role(m: re.Match[str]) -> str:
    target = m.group(2)
    return f"<code>{target.rsplit('.', 1)[-1] if m.group(1) else target}</code>"


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Docstrings written for Sphinx name objects with roles (``:class:`X```);
    show the object's name as code, as Sphinx would (``~`` keeps the last part)."""
    html = ROLE.sub(_role, html)
    return LITERAL.sub(r":\1", html)
