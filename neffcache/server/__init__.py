"""``neffcache serve``: a read-only HTTP API over the index (FastAPI), Prometheus metrics and
the offline coverage dashboard. Importing this package imports nothing heavy; ``app`` and
``metrics`` import FastAPI and prometheus_client (the ``serve`` extra)."""
