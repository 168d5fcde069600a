"""What the documentation site generates instead of writing twice by hand.

``docsgen.hooks`` is the MkDocs hooks file (``hooks:`` in ``mkdocs.yml``);
``docsgen.cli`` renders the command registry as Markdown; ``docsgen.examples``
finds the fenced Python blocks of the docs and the README and their markers,
for the tests that run them. Not installed with the package: a checkout only.
"""
