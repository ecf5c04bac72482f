"""Alembic environment for the neffcache index, configured in code by neffcache.index.engine.

The caller passes an open connection in ``config.attributes["connection"]`` (already inside a
transaction that holds the upgrade lock); without one, an engine is made from
``sqlalchemy.url``. SQLite migrations run in batch mode (ALTER by copy-and-move).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from neffcache.index.models import Base

config = context.config
target_metadata = Base.metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        transaction_per_migration=False,
    )


def run_offline() -> None:
    url = config.get_main_option("sqlalchemy.url")
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=bool(url and url.startswith("sqlite")))
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    from neffcache.index.engine import make_engine

    engine = make_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.connect() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
