"""The key version read directly (app.db.scalar): the same value the engine reads, after every
change; and when the direct connection is lost, the read goes through the engine and the
direct connection is made again."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import text

from app.auth.keys import _VERSION, bump_version
from app.db.engine import create_engine, create_session_factory
from app.db.scalar import ScalarReader, sql_of

NAME = "citegate-scalar-reader-test"  # not a served app's reader, which reads the same table


def test_reads_what_the_engine_reads_and_survives_a_lost_connection(
    client: Any, database_url: str
) -> None:
    async def run() -> None:
        engine = create_engine(database_url)
        reader = ScalarReader(engine, sql_of(_VERSION), _VERSION, name=NAME)
        sessions = create_session_factory(engine)

        async def through_engine() -> int:
            async with engine.connect() as connection:
                return int(await connection.scalar(_VERSION) or 0)

        async def bump() -> None:
            async with sessions() as session:
                await bump_version(session)
                await session.commit()

        try:
            first = await reader.read()
            assert first == await through_engine()
            await bump()
            assert await reader.read() == first + 1
            if engine.dialect.name == "postgresql":
                async with engine.connect() as connection:
                    ended = await connection.scalar(
                        text(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE application_name = :name AND datname = current_database()"
                        ),
                        {"name": NAME},
                    )
                assert ended == 1
                await bump()
                assert await reader.read() == first + 2  # through the engine, this once
                await asyncio.sleep(1.1)  # RETRY_SECONDS: then directly again
                await bump()
                assert await reader.read() == first + 3
                async with engine.connect() as connection:
                    direct = await connection.scalar(
                        text(
                            "SELECT count(*) FROM pg_stat_activity "
                            "WHERE application_name = :name AND datname = current_database()"
                        ),
                        {"name": NAME},
                    )
                assert direct == 1
        finally:
            await reader.aclose()
            await engine.dispose()

    asyncio.run(run())


def test_on_sqlite_the_value_is_read_at_once_elsewhere_it_is_awaited(
    client: Any, database_url: str
) -> None:
    async def run() -> None:
        engine = create_engine(database_url)
        reader = ScalarReader(engine, sql_of(_VERSION), _VERSION, name=NAME)
        sessions = create_session_factory(engine)
        try:
            first = await reader.read()
            if engine.dialect.name != "sqlite":
                assert reader.read_now() is None  # a server's answer is awaited
                return
            assert reader.read_now() == first
            async with sessions() as session:
                await bump_version(session)
                await session.commit()
            assert reader.read_now() == first + 1  # a change another connection committed
        finally:
            await reader.aclose()
            await engine.dispose()

    asyncio.run(run())
