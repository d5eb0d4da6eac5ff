# SPDX-License-Identifier: Apache-2.0
"""Sign-in, users and the audit log."""

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["viewer", "operator", "approver", "admin"]


class LoginRequest(BaseModel):
    username: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=256)


class UserPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: uuid.UUID
    username: str
    role: Role


class UserDetail(UserPublic):
    created_at: datetime
    disabled_at: datetime | None = Field(
        description="when an admin disabled the user (cannot sign in or use a token issued before); null while enabled"
    )


class UserUpdate(BaseModel):
    role: Role | None = Field(None, description="the new role")
    disabled: bool | None = Field(None, description="disable (true) or enable (false) the user")


class PasswordReset(BaseModel):
    password: str = Field(min_length=8, max_length=256)


class UserCreate(BaseModel):
    username: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")
    password: str = Field(min_length=8, max_length=256)
    role: Role = "viewer"


class Token(BaseModel):
    access_token: str
    token_type: Literal["bearer"] = "bearer"
    user: UserPublic


class LoginFailure(BaseModel):
    detail: str


class AuditEntry(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    at: datetime
    actor: str
    action: str
    target: str | None
    detail: dict[str, Any]
