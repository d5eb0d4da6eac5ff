# SPDX-License-Identifier: Apache-2.0
"""The backend's tables as typed SQLAlchemy 2 models.

Catalog data is content-addressed: a catalog piece (one module of one build) is stored once per
digest however many hosts run it, and functions are keyed by (digest, index). A host only records
which pieces it has loaded and where (host_modules). The searchable columns of a function live in the
narrow `functions` table; its blocks, successors and calls live in `function_code` so that scanning
120k names does not read a million blocks. The time series (samples, measurement points) live in
partitioned tables that only app.storage.samples and app.storage.series touch; they have no ORM models.
Unsigned 64-bit addresses are stored in BIGINT columns as their two's-complement bit pattern.
"""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Computed,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

ROLES = ("viewer", "operator", "approver", "admin")


def u64_to_i64(value: int) -> int:
    return value - (1 << 64) if value >= (1 << 63) else value


def i64_to_u64(value: int) -> int:
    return value + (1 << 64) if value < 0 else value


def hex64(value: int) -> str:
    """An unsigned 64-bit value as the API shows it: lower-case hex without 0x."""
    return format(value, "x")


class U64(TypeDecorator[int]):
    """An unsigned 64-bit integer kept bit-for-bit in a signed BIGINT column."""

    impl = BigInteger
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> int | None:
        return None if value is None else u64_to_i64(int(value))

    def process_result_value(self, value: Any, dialect: Dialect) -> int | None:
        return None if value is None else i64_to_u64(value)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSONB, list[Any]: JSONB}


class User(Base):
    __tablename__ = "users"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(Text)
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    failed_logins: Mapped[int] = mapped_column(Integer, default=0)
    locked_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Tokens issued before this (a password reset, a disable) are refused.
    sessions_valid_after: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class AuditLog(Base):
    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(), index=True)
    actor: Mapped[str] = mapped_column(Text)
    action: Mapped[str] = mapped_column(String(64), index=True)
    target: Mapped[str | None] = mapped_column(Text, nullable=True)
    detail: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)


class Host(Base):
    __tablename__ = "hosts"
    id: Mapped[str] = mapped_column(Text, primary_key=True)
    hostname: Mapped[str] = mapped_column(Text)
    kernel_release: Mapped[str] = mapped_column(Text, default="")
    kernel_build_id: Mapped[str] = mapped_column(Text, default="")
    cpu_model: Mapped[str] = mapped_column(Text, default="")
    cpu_count: Mapped[int] = mapped_column(Integer, default=0)
    l1i: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    capabilities: Mapped[list[Any]] = mapped_column(JSONB, default=list)
    agent_version: Mapped[str] = mapped_column(Text, default="")
    metric_interval_ms: Mapped[int] = mapped_column(Integer, default=1000)
    sample_frequency_hz: Mapped[int] = mapped_column(Integer, default=0)
    sample_event: Mapped[str] = mapped_column(Text, default="")
    parse_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    online: Mapped[bool] = mapped_column(Boolean, default=False)
    last_seen: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    connected_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    session_id: Mapped[str | None] = mapped_column(Text, nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="active")  # active | retired
    retired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    replica: Mapped[str | None] = mapped_column(Text, nullable=True)  # backend replica holding the stream
    clock_offset_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # host clock minus ours
    clock_checked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    refused_batches: Mapped[int] = mapped_column(BigInteger, default=0)
    cert_fingerprint: Mapped[str | None] = mapped_column(Text, nullable=True)  # SHA-256 of the DER certificate
    cert_not_after: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    enrolled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Labels the fleet views group and filter by: the agent's (agent_labels, from its Hello) until an
    # admin edits them (migration 0014).
    labels: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    agent_labels: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    labels_edited_by: Mapped[str | None] = mapped_column(Text, nullable=True)
    labels_edited_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class HostModule(Base):
    """A module a host's target has loaded, with its catalog piece's digest and where it is loaded."""

    __tablename__ = "host_modules"
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True)
    target_id: Mapped[str] = mapped_column(String(64), primary_key=True, default="kernel")
    name: Mapped[str] = mapped_column(Text, primary_key=True)
    build_id: Mapped[str] = mapped_column(Text, default="")
    digest: Mapped[str] = mapped_column(String(64), index=True)
    base_address: Mapped[int] = mapped_column(U64)
    function_count: Mapped[int] = mapped_column(Integer)
    block_count: Mapped[int] = mapped_column(Integer)
    position: Mapped[int] = mapped_column(Integer, default=0)


class CatalogPiece(Base):
    __tablename__ = "catalog_pieces"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    module: Mapped[str] = mapped_column(Text)
    function_count: Mapped[int] = mapped_column(Integer)
    block_count: Mapped[int] = mapped_column(Integer)
    complete: Mapped[bool] = mapped_column(Boolean, default=False)
    stored_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Function(Base):
    __tablename__ = "functions"
    __table_args__ = (
        UniqueConstraint("digest", "index", name="uq_functions_digest_index"),
        Index("ix_functions_name", "name"),
        Index("ix_functions_digest_offset", "digest", "offset"),
    )
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    digest: Mapped[str] = mapped_column(ForeignKey("catalog_pieces.digest", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(Text)
    name_lc: Mapped[str] = mapped_column(Text, Computed("lower(name)", persisted=True))
    offset: Mapped[int] = mapped_column(BigInteger)
    size: Mapped[int] = mapped_column(BigInteger)
    block_count: Mapped[int] = mapped_column(Integer)
    undecodable: Mapped[bool] = mapped_column(Boolean, default=False)
    undecodable_offset: Mapped[int] = mapped_column(BigInteger, default=0)


class FunctionCode(Base):
    """Blocks and calls of one function in a compact form:
    blocks = [[offset, size, instruction_count, [[kind, target, target_name], ...]], ...] where a
    tail call's target is relative to the module base of the host that sent it (KASLR-independent);
    calls = [[site_offset, target relative to the module base, target_name, target_module], ...]."""

    __tablename__ = "function_code"
    digest: Mapped[str] = mapped_column(ForeignKey("catalog_pieces.digest", ondelete="CASCADE"), primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    blocks: Mapped[list[Any]] = mapped_column(JSONB)
    calls: Mapped[list[Any]] = mapped_column(JSONB)
    indirect_call_sites: Mapped[list[Any]] = mapped_column(JSONB)


class InstructionCache(Base):
    """Disassembly of one function of one build; offsets only, so any host of that build can use it."""

    __tablename__ = "instruction_cache"
    digest: Mapped[str] = mapped_column(ForeignKey("catalog_pieces.digest", ondelete="CASCADE"), primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    instructions: Mapped[list[Any]] = mapped_column(JSONB)
    stored_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class HostTarget(Base):
    """What a host's agent serves: the kernel, or an attached process (until it exits or is detached)."""

    __tablename__ = "host_targets"
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # "kernel" or "p<pid>-<start time>"
    kind: Mapped[str] = mapped_column(String(16))  # kernel | process
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    command: Mapped[str] = mapped_column(Text, default="")
    executable: Mapped[str] = mapped_column(Text, default="")
    state: Mapped[str] = mapped_column(String(16))  # attached | exited | detached | gone
    detail: Mapped[str] = mapped_column(Text, default="")
    attached_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Command(Base):
    """One command for a host's agent, from the request to its result. The id is the client's
    idempotency key; every state change is recorded here and audited."""

    __tablename__ = "commands"
    __table_args__ = (
        Index("ix_commands_host_state", "host_id", "state"),
        Index("ix_commands_host_created", "host_id", "created_at"),
    )
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(32))
    params: Mapped[dict[str, Any]] = mapped_column(JSONB)
    state: Mapped[str] = mapped_column(String(16))  # queued | sent | running | done | failed | cancelled
    progress: Mapped[float | None] = mapped_column(Float, nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_by: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    replica: Mapped[str | None] = mapped_column(Text, nullable=True)  # the replica that sent it
    sends: Mapped[int] = mapped_column(Integer, default=0)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)


class Measurement(Base):
    """A measurement on one target of one host; its values live in the series (app.storage.samples)."""

    __tablename__ = "measurements"
    __table_args__ = (Index("ix_measurements_host_created", "host_id", "created_at"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    target_id: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))  # starting | armed | running | target_exited | stopped | failed
    detail: Mapped[str] = mapped_column(Text, default="")
    metrics: Mapped[list[Any]] = mapped_column(JSONB)
    request: Mapped[dict[str, Any]] = mapped_column(JSONB)
    interval_ms: Mapped[int] = mapped_column(Integer)
    resource_count: Mapped[int] = mapped_column(Integer, default=0)
    start_command: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True), nullable=True)
    created_by: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_ts: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Intervals the backend refused (acknowledged, not stored) and the reason of the last one.
    refused_intervals: Mapped[int] = mapped_column(BigInteger, default=0)
    refusal: Mapped[str] = mapped_column(Text, default="")


class MeasurementResource(Base):
    """One row of a measurement (a function or a block), as the agent armed it: metrics holds, per
    metric, whether it is served, its label, mechanism, unit, and the reason when it is not."""

    __tablename__ = "measurement_resources"
    measurement_id: Mapped[str] = mapped_column(ForeignKey("measurements.id", ondelete="CASCADE"), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(String(64))
    function_index: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(8))  # function | block
    block_offset: Mapped[int | None] = mapped_column(Integer, nullable=True)
    function_name: Mapped[str] = mapped_column(Text)
    address: Mapped[int] = mapped_column(U64)
    size: Mapped[int] = mapped_column(BigInteger)
    function_row: Mapped[int | None] = mapped_column(Integer, nullable=True)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSONB)


class SeriesState(Base):
    """How far the series' rollups reach (app.storage.series.rollups)."""

    __tablename__ = "series_state"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    watermark_1m: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    watermark_1h: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class StackDef(Base):
    """One call stack of one host, named by the agent's content id (recomputed by the backend):
    modules = [[kind, key, name], ...] (key: catalog digest or file path), frames = flattened
    [module position, function index, offset, ...] leaf first. seen_at is refreshed when it is defined
    again, so retention keeps stacks an agent may still refer to."""

    __tablename__ = "stack_defs"
    host_id: Mapped[str] = mapped_column(Text, primary_key=True)
    stack_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    modules: Mapped[list[Any]] = mapped_column(JSONB)
    frames: Mapped[list[int]] = mapped_column(ARRAY(BigInteger))
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


# stack_samples (one row per host, interval and stack, per-context counts in arrays) is range-partitioned
# by time like the other series; it is described by its migration and read and written by app.storage.stacks.


class EnrolmentToken(Base):
    """A one-time token an admin creates so that one host can enrol; only its SHA-256 is kept. A token
    for a given host id may also replace that host's current certificate; one without cannot."""

    __tablename__ = "enrolment_tokens"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    note: Mapped[str] = mapped_column(Text, default="")
    host_id: Mapped[str | None] = mapped_column(Text, nullable=True)  # only this host may use it, if set
    created_by: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    used_by_host: Mapped[str | None] = mapped_column(Text, nullable=True)
    # SHA-256 of the public key it was used with: only that key may ask again (a lost answer's retry)
    used_key_fingerprint: Mapped[str | None] = mapped_column(Text, nullable=True)
    used_cert_fingerprint: Mapped[str | None] = mapped_column(Text, nullable=True)  # the certificate it issued
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class EnrolmentRequest(Base):
    """A key that asked to enrol a host id without a token, waiting for an admin's decision. Several keys
    may ask for the same host id: each is its own request (a conflict the console shows)."""

    __tablename__ = "enrolment_requests"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    host_id: Mapped[str] = mapped_column(Text)
    key_fingerprint: Mapped[str] = mapped_column(Text)  # SHA-256 of the requesting key (SubjectPublicKeyInfo)
    hostname: Mapped[str] = mapped_column(Text)
    csr_pem: Mapped[str] = mapped_column(Text)
    peer: Mapped[str] = mapped_column(Text, default="")
    requested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending | approved | rejected
    decided_by: Mapped[str | None] = mapped_column(Text, nullable=True)
    decided_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class DeliveryMark(Base):
    """The highest acknowledged sequence number of one agent instance's data messages."""

    __tablename__ = "delivery_marks"
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True)
    instance_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class DataGap(Base):
    """A period of a host's data that is missing for a known reason: dropped by the agent (its buffer
    was full), sequence numbers that never arrived, or batches refused (clock out of bounds)."""

    __tablename__ = "data_gaps"
    __table_args__ = (Index("ix_data_gaps_host_end", "host_id", "end_ts"),)
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    start_ts: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    end_ts: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    instance_id: Mapped[str] = mapped_column(String(64), default="")
    first_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    messages: Mapped[int] = mapped_column(BigInteger, default=0)
    reason: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(16))  # agent | backend
    recorded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Plan(Base):
    """A code positioning plan an agent made for a root function of one target, and its workflow:
    planning → ready | failed | cancelled; requested → approved | rejected; installing → installed |
    install_failed; reverting → reverted; stale when the target it was made for is gone or changed.
    plan_json is the agent's plan as the backend validated it (app.domain.plan_check); every change is audited."""

    __tablename__ = "plans"
    __table_args__ = (
        Index("ix_plans_host_created", "host_id", "created_at"),
        Index("ix_plans_host_target_state", "host_id", "target_id", "state"),
    )
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"))
    target_id: Mapped[str] = mapped_column(String(64))
    root_digest: Mapped[str] = mapped_column(String(64))
    root_function_index: Mapped[int] = mapped_column(Integer)
    root_name: Mapped[str] = mapped_column(Text)
    options: Mapped[dict[str, Any]] = mapped_column(JSONB)
    state: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    plan_json: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    plan_status: Mapped[str | None] = mapped_column(String(16), nullable=True)  # the plan's own status
    estimated: Mapped[bool] = mapped_column(Boolean, default=False)
    code_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    build_id: Mapped[str | None] = mapped_column(Text, nullable=True)
    target_pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    target_start_time: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    target_module: Mapped[str | None] = mapped_column(Text, nullable=True)
    kernel_build_id: Mapped[str | None] = mapped_column(Text, nullable=True)
    make_command: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True), nullable=True)
    created_by: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    ready_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    requested_by: Mapped[str | None] = mapped_column(Text, nullable=True)
    requested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    approved_by: Mapped[str | None] = mapped_column(Text, nullable=True)
    approved_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    approved_code_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    approved_build_id: Mapped[str | None] = mapped_column(Text, nullable=True)
    rejected_by: Mapped[str | None] = mapped_column(Text, nullable=True)
    rejected_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    reject_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    install_by: Mapped[str | None] = mapped_column(Text, nullable=True)
    install_command: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True), nullable=True)
    installed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    install_detail: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    revert_by: Mapped[str | None] = mapped_column(Text, nullable=True)
    revert_command: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True), nullable=True)
    reverted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revert_detail: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    stale_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    window_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    before_measurement: Mapped[str | None] = mapped_column(String(64), nullable=True)
    after_measurement: Mapped[str | None] = mapped_column(String(64), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # A per-host plan a roll-out made from an approved plan (migration 0019): the plan whose approval it
    # inherits (same code hash and build id) and the roll-out.
    derived_from: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True), nullable=True)
    rollout_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True), nullable=True)


class Rollout(Base):
    """A staged roll-out of one approved plan over the hosts of its build (app.domain.rollouts):
    running → paused | halted | completed | reverting; paused → running | reverting; halted, completed →
    reverting → reverted. Its hosts are rollout_hosts."""

    __tablename__ = "rollouts"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    plan_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"))
    plan_host_id: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(16))  # kernel | process
    build_id: Mapped[str] = mapped_column(Text)
    code_sha256: Mapped[str] = mapped_column(String(64))
    requested_by: Mapped[str] = mapped_column(Text)
    labels: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    wave_sizes: Mapped[list[Any]] = mapped_column(JSONB)
    settings: Mapped[dict[str, Any]] = mapped_column(JSONB)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    wave: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class RolloutHost(Base):
    """One host of a roll-out: its wave, the target and per-host plan, and its state
    (pending, installing, comparing, installed, reverted, skipped, failed) with the reason."""

    __tablename__ = "rollout_hosts"
    rollout_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("rollouts.id", ondelete="CASCADE"), primary_key=True)
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    wave: Mapped[int] = mapped_column(Integer)
    target_id: Mapped[str] = mapped_column(String(64))
    plan_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True), nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    offline_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
