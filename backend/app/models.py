# SPDX-License-Identifier: Apache-2.0
"""The backend's tables as typed SQLAlchemy 2 models.

Catalog data is content-addressed: a catalog piece (one module of one build) is stored once per
digest however many hosts run it, and functions are keyed by (digest, index). A host only records
which pieces it has loaded and where (host_modules). The searchable columns of a function live in the
narrow `functions` table; its blocks, successors and calls live in `function_code` so that scanning
120k names does not read a million blocks. Samples are a plain time series keyed by host and interval.
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
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

ROLES = ("viewer", "operator", "approver", "admin")


def u64_to_i64(value: int) -> int:
    return value - (1 << 64) if value >= (1 << 63) else value


def i64_to_u64(value: int) -> int:
    return value + (1 << 64) if value < 0 else value


class U64(TypeDecorator):
    """An unsigned 64-bit integer kept bit-for-bit in a signed BIGINT column."""

    impl = BigInteger
    cache_ok = True

    def process_bind_param(self, value, dialect):
        return None if value is None else u64_to_i64(int(value))

    def process_result_value(self, value, dialect):
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


class HostModule(Base):
    __tablename__ = "host_modules"
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(Text, primary_key=True)
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
    __table_args__ = (UniqueConstraint("digest", "index", name="uq_functions_digest_index"),
                      Index("ix_functions_name", "name"),
                      Index("ix_functions_digest_offset", "digest", "offset"))
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


class BlockSample(Base):
    __tablename__ = "block_samples"
    __table_args__ = (Index("ix_block_samples_host_ts", "host_id", "ts"),
                      Index("ix_block_samples_host_fn_ts", "host_id", "function_id", "ts"))
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    host_id: Mapped[str] = mapped_column(Text)
    ts: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    function_id: Mapped[int] = mapped_column(BigInteger)
    block_offset: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(BigInteger)
    idle: Mapped[bool] = mapped_column(Boolean, default=False)  # taken in the idle task (by context)
    # Per-instruction counts: offsets from the block start and their samples (NULL from older agents).
    insn_offsets: Mapped[list[int] | None] = mapped_column(ARRAY(Integer), nullable=True)
    insn_counts: Mapped[list[int] | None] = mapped_column(ARRAY(BigInteger), nullable=True)


class IntervalTotal(Base):
    """Whole-host totals of one metric interval (all samples, user, unmapped, lost)."""

    __tablename__ = "interval_totals"
    host_id: Mapped[str] = mapped_column(Text, primary_key=True)
    ts: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    interval_ms: Mapped[int] = mapped_column(Integer)
    total_samples: Mapped[int] = mapped_column(BigInteger)
    user_samples: Mapped[int] = mapped_column(BigInteger)
    unmapped_samples: Mapped[int] = mapped_column(BigInteger)
    lost_samples: Mapped[int] = mapped_column(BigInteger)
    dropped_samples: Mapped[int] = mapped_column(BigInteger, default=0)
    idle_samples: Mapped[int] = mapped_column(BigInteger, default=0)
    idle_by_context: Mapped[bool] = mapped_column(Boolean, default=False)
    stack_samples: Mapped[int] = mapped_column(BigInteger, default=0)
    stack_dropped_samples: Mapped[int] = mapped_column(BigInteger, default=0)


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


class StackSample(Base):
    """Samples of one stack on one host in one interval: the total and, in parallel arrays, the counts
    per (pid, command, CPU)."""

    __tablename__ = "stack_samples"
    __table_args__ = (Index("ix_stack_samples_host_ts", "host_id", "ts"),)
    host_id: Mapped[str] = mapped_column(Text, primary_key=True)
    ts: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    stack_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)
    pids: Mapped[list[int]] = mapped_column(ARRAY(Integer))
    comms: Mapped[list[str]] = mapped_column(ARRAY(Text))
    cpus: Mapped[list[int]] = mapped_column(ARRAY(Integer))
    counts: Mapped[list[int]] = mapped_column(ARRAY(BigInteger))


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
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class EnrolmentRequest(Base):
    """A host that asked to enrol without a token, waiting for an admin's decision."""

    __tablename__ = "enrolment_requests"
    host_id: Mapped[str] = mapped_column(Text, primary_key=True)
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
