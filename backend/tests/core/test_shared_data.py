# SPDX-License-Identifier: Apache-2.0
"""Replicas behind one address share what identifies the installation (`tls/`, `secret-key`,
`admin-password`) and one database, and may all start at the same moment (docker compose starts them
together). Each start-up step is raced here by several real processes released at once by a barrier:
the CA and server certificate (an flock in the folder), a secret file (written aside and linked into
place), the migrations (an advisory lock) and the first admin (ON CONFLICT). Every process must end
with the same CA and the same secret, and the database with one admin."""

import multiprocessing as mp
import subprocess
import sys
import uuid

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from sqlalchemy import create_engine, text

from app.core import pki
from tests.backend_process import BACKEND_DIR
from tests.conftest import _recreate_database
from tests.core.racers import race_pki, race_secret

RACERS = 4
HANG_S = 120  # a bound for processes that are bound to end, not a speed check


def _run_all(target, args_of) -> list:
    ctx = mp.get_context("spawn")  # fresh interpreters, as separate replicas are
    barrier, out = ctx.Barrier(RACERS), ctx.Queue()
    procs = [ctx.Process(target=target, args=(barrier, *args_of(i), out)) for i in range(RACERS)]
    for p in procs:
        p.start()
    results = [out.get(timeout=HANG_S) for _ in procs]
    for p in procs:
        p.join(HANG_S)
        assert p.exitcode == 0
    return results


def test_replicas_starting_at_once_on_one_folder_share_one_ca(tmp_path):
    folder = tmp_path / "tls"
    # Each racer has a host name of its own, as replicas in containers do.
    results = _run_all(race_pki, lambda i: (str(folder), f"replica-{i}.example"))
    cas = {ca for _n, ca, _s in results}
    assert len(cas) == 1, f"{len(cas)} different CAs were handed to {RACERS} replicas"
    [ca_pem] = cas
    assert (folder / "ca.pem").read_bytes() == ca_pem
    ca = x509.load_pem_x509_certificate(ca_pem)
    key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), password=None)
    assert key.public_key().public_numbers() == ca.public_key().public_numbers()  # type: ignore[union-attr]
    # Every replica's server certificate is the CA's and names that replica; the one left in the folder
    # names them all, so the next start of any of them keeps it.
    for name, _ca, server_pem in results:
        cert = x509.load_pem_x509_certificate(server_pem)
        cert.verify_directly_issued_by(ca)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert name in [str(n.value) for n in san]
    final = x509.load_pem_x509_certificate((folder / "server.pem").read_bytes())
    names = [str(n.value) for n in final.extensions.get_extension_for_class(x509.SubjectAlternativeName).value]
    assert {f"replica-{i}.example" for i in range(RACERS)} <= set(names)
    again = pki.load_or_create(folder, "replica-3.example")
    assert again.server_cert_pem == (folder / "server.pem").read_bytes() and again.ca_pem == ca_pem
    assert not list(folder.glob("*.tmp"))


def test_a_server_certificate_of_another_ca_is_made_again(tmp_path):
    folder = tmp_path / "tls"
    first = pki.load_or_create(folder, "lb.example")
    other = pki.load_or_create(tmp_path / "other", "lb.example")
    (folder / "server.pem").write_bytes(other.server_cert_pem)  # stale: signed by another CA
    again = pki.load_or_create(folder, "lb.example")
    assert again.ca_pem == first.ca_pem
    x509.load_pem_x509_certificate(again.server_cert_pem).verify_directly_issued_by(first.ca_cert)


def test_replicas_starting_at_once_read_one_secret(tmp_path):
    path = tmp_path / "secret-key"
    values = _run_all(race_secret, lambda i: (str(path),))
    assert len(set(values)) == 1 and len(values[0]) == 32, values
    assert path.read_text().strip() == values[0]
    assert (path.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["secret-key"]  # no file of a racer left behind


def test_replicas_migrating_one_fresh_database_at_once_create_one_admin(postgres_url, tmp_path):
    url = _recreate_database(postgres_url, f"hotpath_race_{uuid.uuid4().hex[:8]}")
    program = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from app.core.db import upgrade_database\n"
        "from app.server import ensure_admin\n"
        "url, start, password = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])\n"
        "while not start.exists(): time.sleep(0.01)\n"
        "upgrade_database(url)\n"
        "ensure_admin(url, password)\n"
    )
    start = tmp_path / "start"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", program, url, str(start), str(tmp_path / "admin-password")],
            cwd=BACKEND_DIR,
            stderr=subprocess.PIPE,
        )
        for _ in range(3)
    ]
    start.touch()  # release them together (each polls for it; they were started before)
    for p in procs:
        _out, err = p.communicate(timeout=HANG_S)
        assert p.returncode == 0, err.decode()[-3000:]
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            admins = conn.execute(text("SELECT count(*) FROM users WHERE username = 'admin'")).scalar_one()
            audits = conn.execute(
                text("SELECT count(*) FROM audit_log WHERE action = 'user_created' AND target = 'admin'")
            ).scalar_one()
            versions = conn.execute(text("SELECT count(*) FROM alembic_version")).scalar_one()
    finally:
        engine.dispose()
    assert (admins, audits, versions) == (1, 1, 1)
