"""Alembic migrations for the neffcache index (shipped in the wheel as neffcache.migrations)."""
