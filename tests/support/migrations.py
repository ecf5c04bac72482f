"""The heads of the migrations shipped with the package (one, the schema revision)."""

from __future__ import annotations

from neffcache.index.engine import alembic_config


def script_heads() -> tuple[str, ...]:
    from alembic.script import ScriptDirectory

    return tuple(ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads())
