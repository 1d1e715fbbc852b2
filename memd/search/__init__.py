"""Full-text search over every tier: derived state in the state dir, kept current off the write path.

`query` (the query language, pure), `documents` (tier files into indexable documents, pure), `store` (the SQLite
FTS5 database), `indexer` (bringing it in step with the files, on the search thread), `service` (what the daemon
and handlers use: the change listener, catch-up before a query, reindex). docs/architecture.md, "Search".
"""
