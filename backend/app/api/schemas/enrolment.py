# SPDX-License-Identifier: Apache-2.0
"""Enrolment tokens and requests."""

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class EnrolmentTokenCreate(BaseModel):
    note: str = Field("", max_length=200, description="what the token is for, for the list")
    hours: float = Field(24.0, gt=0, le=24 * 30, description="how long the token stays valid")
    host_id: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        pattern=r"^[^\x00-\x1f\x7f]+$",
        description="only this host may use the token; needed to enrol a host that "
        "holds a certificate already (a new key, a reinstalled agent)",
    )


class EnrolmentTokenPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: uuid.UUID
    note: str
    host_id: str | None
    created_by: str
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None
    used_by_host: str | None
    revoked_at: datetime | None


class EnrolmentTokenCreated(EnrolmentTokenPublic):
    token: str = Field(description="the one-time token; shown only in this answer")
    ca_pem: str = Field(description="the CA certificate agents verify the backend with")
    enroll_port: int = Field(description="the port agents enrol on (TLS)")


class EnrolmentRequestPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: uuid.UUID
    host_id: str
    key_fingerprint: str = Field(
        description="SHA-256 (hex) of the requesting key's DER SubjectPublicKeyInfo; "
        "on the host: openssl pkey -in key.pem -pubout -outform DER | sha256sum"
    )
    hostname: str
    peer: str
    requested_at: datetime
    status: Literal["pending", "approved", "rejected"]
    decided_by: str | None
    decided_at: datetime | None
    conflicting: int = Field(description="how many other keys ask for the same host id and are pending")
    host_enrolled: bool = Field(
        description="the host id holds a certificate already (it cannot be approved; "
        "only a token created for this host id can enrol it again)"
    )


class EnrolmentRejectMany(BaseModel):
    request_ids: list[uuid.UUID] | None = Field(None, max_length=5000, description="the pending requests to reject")
    all_pending: bool = Field(False, description="reject every pending request instead")

    @model_validator(mode="after")
    def _one_of(self) -> "EnrolmentRejectMany":
        if (self.request_ids is None) == (not self.all_pending):
            raise ValueError("give either request_ids or all_pending: true")
        return self


class EnrolmentRejected(BaseModel):
    rejected: int = Field(description="how many pending requests were rejected")
