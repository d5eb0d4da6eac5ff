# SPDX-License-Identifier: Apache-2.0
"""Users: sign-in lookups, creation, the admins left."""

import uuid

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.security import hash_password
from app.storage.models import User


async def get_user_by_username(session: AsyncSession, username: str) -> User | None:
    return (await session.execute(select(User).where(User.username == username))).scalar_one_or_none()


async def get_user(session: AsyncSession, user_id: uuid.UUID) -> User | None:
    return await session.get(User, user_id)


async def create_user(session: AsyncSession, username: str, password: str, role: str) -> User:
    user = User(id=uuid.uuid4(), username=username, password_hash=hash_password(password), role=role)
    session.add(user)
    await session.flush()
    return user


async def enabled_admin_ids_locked(session: AsyncSession) -> list[uuid.UUID]:
    """The enabled admins' ids, their rows locked until the transaction ends, so two admins demoting or
    disabling each other at once cannot both pass a check that one admin stays."""
    return list(
        (
            await session.execute(
                select(User.id)
                .where(User.role == "admin", User.disabled_at.is_(None))
                .order_by(User.id)
                .with_for_update()
            )
        ).scalars()
    )


async def list_users(session: AsyncSession) -> list[User]:
    return list((await session.execute(select(User).order_by(User.username))).scalars())
