"""The PostgreSQL engine: the history contract on a shared database server.

``Store("postgresql://user@host/db")`` selects it. The tables and their
reasons are in ``schema.py``; connections and honest failures in
``connect.py``; the append transaction and reads in ``workspace.py``;
the rewrite primitive (``replace``), backup and stat in ``rewrites.py``
(the rewrites themselves: ``ledger.storage.rewrites``); ``session_history`` pages in
``reader.py``.
"""
