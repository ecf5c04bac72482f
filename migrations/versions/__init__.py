"""Alembic revision scripts."""
