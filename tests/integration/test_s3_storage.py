"""S3Storage against the session's real S3 API server: what the shared contract tests
(tests/unit/test_storage.py) do not cover: multipart, pagination, the bucket's top,
failures, and credentials that never show."""

from __future__ import annotations

import http.client
import http.server
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import SecretStr

from processor.config import S3Location, load_settings
from processor.state.factory import open_storage
from processor.state.s3 import S3Storage, S3StorageError
from processor.state.storage import CheckpointStorage, DirectoryStorage, SnapshotMissing
from tests.conftest import TEST_BUCKET, TEST_REGION, create_bucket, s3_storage_for
from tests.s3server import S3Server

_MiB = 1 << 20


def test_satisfies_protocol(s3_storage: S3Storage) -> None:
    as_protocol: CheckpointStorage = s3_storage  # mypy checks the signatures
    as_protocol.put_bytes("k", b"v")
    assert as_protocol.get_bytes("k") == b"v"


def test_large_file_goes_up_in_parts(
    s3_server: S3Server,
    s3_location: S3Location,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # S3's smallest part, so the test is honest for AWS too.
    storage = s3_storage_for(
        s3_server, s3_location, multipart_threshold=5 * _MiB, part_size=5 * _MiB
    )
    src = tmp_path / "000042.sst"
    data = os.urandom(11 * _MiB + 3)  # two full parts and a short one
    src.write_bytes(data)
    sizes: list[int] = []
    real_upload_part = storage._upload_part

    def spy(key: str, name: str, upload_id: str, number: int, chunk: bytes) -> str:
        sizes.append(len(chunk))
        return real_upload_part(key, name, upload_id, number, chunk)

    monkeypatch.setattr(storage, "_upload_part", spy)
    storage.put_immutable_file("j/t/shared/000042.sst", src)
    assert sizes == [5 * _MiB, 5 * _MiB, 1 * _MiB + 3]
    dest = tmp_path / "restored.sst"
    storage.get_file("j/t/shared/000042.sst", dest)
    assert dest.read_bytes() == data
    # At the threshold exactly: one PUT.
    src.write_bytes(data[: 5 * _MiB])
    storage.put_file("j/t/chk-1/small", src)
    assert len(sizes) == 3
    assert storage.get_bytes("j/t/chk-1/small") == data[: 5 * _MiB]


def test_failed_multipart_upload_is_aborted_and_keeps_the_old_object(
    s3_server: S3Server,
    s3_location: S3Location,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage = s3_storage_for(
        s3_server, s3_location, multipart_threshold=5 * _MiB, part_size=5 * _MiB
    )
    storage.put_bytes("j/big", b"old")
    src = tmp_path / "big"
    src.write_bytes(os.urandom(12 * _MiB))
    real_upload_part = storage._upload_part
    parts: list[int] = []

    def failing_second_part(key: str, name: str, upload_id: str, number: int, chunk: bytes) -> str:
        parts.append(number)
        if number == 2:
            raise S3StorageError("S3 put failed: connection reset")
        return real_upload_part(key, name, upload_id, number, chunk)

    monkeypatch.setattr(storage, "_upload_part", failing_second_part)
    with pytest.raises(S3StorageError, match="connection reset"):
        storage.put_file("j/big", src)
    assert parts == [1, 2]
    assert storage.get_bytes("j/big") == b"old"
    assert storage.list("") == ["j/big"]
    uploads = storage._s3.list_multipart_uploads(Bucket=TEST_BUCKET, Prefix=s3_location.prefix)
    assert uploads.get("Uploads", []) == []


def test_list_follows_pages(s3_server: S3Server, s3_location: S3Location) -> None:
    # Pages of 3 here exercise what pages of 1000 do on a job with many checkpoint files.
    storage = s3_storage_for(s3_server, s3_location, list_page_size=3)
    keys = [f"j/t/shared/s-{i:06d}.sst" for i in range(10)]
    for key in reversed(keys):
        storage.put_bytes(key, b"x")
    storage.put_bytes("j/t/chk-000000000001/CURRENT", b"x")
    storage.put_bytes("j/t2/shared/other.sst", b"x")
    assert storage.list("j/t/shared/") == keys
    assert storage.list("j/t/shared/s-00000") == keys
    assert storage.list("j/t/") == ["j/t/chk-000000000001/CURRENT", *keys]
    assert len(storage.list("")) == 12
    assert storage.list("j/t/shared/s-000010") == []


def test_location_at_the_top_of_a_bucket(s3_server: S3Server) -> None:
    bucket = f"top-{uuid.uuid4().hex[:12]}"
    create_bucket(s3_server, bucket)
    storage = s3_storage_for(s3_server, S3Location(bucket))
    storage.put_bytes("j/t/a", b"1")
    storage.put_bytes("k", b"2")
    assert storage.list("") == ["j/t/a", "k"]
    assert storage.list("j/") == ["j/t/a"]
    assert storage._s3.get_object(Bucket=bucket, Key="j/t/a")["Body"].read() == b"1"
    storage.delete("j/t/a")
    assert storage.list("") == ["k"]


def test_keys_live_under_the_prefix(s3_storage: S3Storage, s3_location: S3Location) -> None:
    s3_storage.put_bytes("j/t/chk-1/_snapshot.json", b"{}")
    listed = s3_storage._s3.list_objects_v2(Bucket=TEST_BUCKET, Prefix=s3_location.prefix + "/")
    assert [o["Key"] for o in listed.get("Contents", [])] == [
        f"{s3_location.prefix}/j/t/chk-1/_snapshot.json"
    ]


def test_missing_bucket_is_an_error_not_a_missing_snapshot(s3_server: S3Server) -> None:
    storage = s3_storage_for(s3_server, S3Location(f"no-such-{uuid.uuid4().hex[:12]}", "p"))
    with pytest.raises(S3StorageError, match="NoSuchBucket"):
        storage.get_bytes("j/t/chk-1/_snapshot.json")
    with pytest.raises(S3StorageError, match="NoSuchBucket"):
        storage.put_bytes("j/t/chk-1/_snapshot.json", b"{}")


def test_open_storage_follows_the_setting(
    s3_server: S3Server, s3_location: S3Location, tmp_path: Path
) -> None:
    assert isinstance(open_storage(load_settings(checkpoint_dir=tmp_path)), DirectoryStorage)
    settings = load_settings(
        checkpoint_dir=str(s3_location),
        s3_endpoint_url=s3_server.endpoint_url,
        s3_region=TEST_REGION,
        s3_access_key_id=s3_server.access_key_id,
        s3_secret_access_key=s3_server.secret_access_key,
    )
    storage = open_storage(settings)
    assert isinstance(storage, S3Storage)
    storage.put_bytes("j/k", b"through the settings")
    assert s3_storage_for(s3_server, s3_location).get_bytes("j/k") == b"through the settings"


# --- credentials ---------------------------------------------------------------------------


def test_credentials_never_show(
    s3_server: S3Server,
    s3_location: S3Location,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    key_id = f"AKIA{uuid.uuid4().hex[:16].upper()}"
    wrong_secret = f"wrong-{uuid.uuid4().hex}"
    good = s3_storage_for(s3_server, s3_location)
    bad = S3Storage(
        s3_location,
        endpoint_url=s3_server.endpoint_url,
        region=TEST_REGION,
        access_key_id=SecretStr(s3_server.access_key_id),
        secret_access_key=SecretStr(wrong_secret),
        max_attempts=1,
    )
    unknown = S3Storage(
        s3_location,
        endpoint_url=s3_server.endpoint_url,
        region=TEST_REGION,
        access_key_id=SecretStr(key_id),
        secret_access_key=SecretStr(s3_server.secret_access_key),
        max_attempts=1,
    )
    src = tmp_path / "f"
    src.write_bytes(b"data")
    good.put_bytes("j/k", b"v")
    seen: list[str] = [repr(good), str(good), repr(bad), repr(unknown)]
    attempts: list[Callable[[S3Storage], object]] = [
        lambda s: s.put_bytes("j/k", b"x"),
        lambda s: s.put_file("j/k2", src),
        lambda s: s.get_bytes("j/k"),
        lambda s: s.get_file("j/k", tmp_path / "out"),
        lambda s: s.list("j/"),
        lambda s: s.delete("j/k"),
    ]
    for storage in (bad, unknown):
        for attempt in attempts:
            with pytest.raises(S3StorageError) as info:
                attempt(storage)
            message = str(info.value)
            assert "\n" not in message
            assert info.value.__cause__ is None and info.value.__suppress_context__
            seen += [message, repr(info.value)]
    assert good.get_bytes("j/k") == b"v"  # no wrong credential changed anything
    settings = load_settings(
        checkpoint_dir=str(s3_location),
        s3_access_key_id=key_id,
        s3_secret_access_key=wrong_secret,
    )
    seen += [repr(settings), str(settings), repr(open_storage(settings))]
    seen += [record.getMessage() for record in caplog.records]
    text = "\n".join(seen)
    for secret in (wrong_secret, s3_server.secret_access_key, key_id, s3_server.access_key_id):
        assert secret not in text
    assert "SignatureDoesNotMatch" in text or "AccessDenied" in text or "InvalidAccessKeyId" in text
    assert str(s3_location) in text  # the errors do say where


def test_a_location_with_credentials_in_it_is_refused_without_echoing_them() -> None:
    from processor.config import SettingsError

    with pytest.raises(SettingsError) as info:
        load_settings(checkpoint_dir="s3://AKIAXX:topsecret@bucket/prefix")
    assert "topsecret" not in str(info.value)
    assert "AKIAXX" not in str(info.value)


def test_missing_key_is_snapshot_missing_for_exists_too(s3_storage: S3Storage) -> None:
    assert not s3_storage.exists("j/t/chk-9/_snapshot.json")
    with pytest.raises(SnapshotMissing):
        s3_storage.get_bytes("j/t/chk-9/_snapshot.json")


# --- retries -------------------------------------------------------------------------------


class _FlakyProxy:
    """Between the client and the S3 server: answers the first requests with the failures
    in ``script`` (an HTTP status, or "reset" to drop the connection), then forwards."""

    def __init__(self, upstream_port: int, script: list[int | str]) -> None:
        self.script = list(script)
        self.seen: list[str] = []  # "METHOD path" -> its fate
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with proxy._lock:
                    fate = proxy.script.pop(0) if proxy.script else "forward"
                    proxy.seen.append(f"{self.command} {fate}")
                if fate == "reset":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if isinstance(fate, int):
                    error = (
                        b"<Error><Code>SlowDown</Code><Message>Reduce your rate</Message></Error>"
                    )
                    self.send_response(fate)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(error)))
                    self.end_headers()
                    self.wfile.write(error)
                    return
                upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=30)
                try:
                    # The Host header goes along unchanged: it is part of the signature.
                    upstream.request(self.command, self.path, body, dict(self.headers))
                    response = upstream.getresponse()
                    data = response.read()
                    self.send_response(response.status)
                    for name, value in response.getheaders():
                        if name.lower() not in (
                            "content-length",
                            "transfer-encoding",
                            "connection",
                        ):
                            self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    upstream.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> _FlakyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _through(
    proxy: _FlakyProxy, server: S3Server, location: S3Location, **options: int
) -> S3Storage:
    return S3Storage(
        location,
        endpoint_url=proxy.url,
        region=TEST_REGION,
        access_key_id=SecretStr(server.access_key_id),
        secret_access_key=SecretStr(server.secret_access_key),
        **options,
    )


def test_throttling_5xx_and_dropped_connections_are_retried(
    s3_server: S3Server, s3_location: S3Location, tmp_path: Path
) -> None:
    direct = s3_storage_for(s3_server, s3_location)
    # Few failures: botocore's backoff is real time (up to 1, 2, 4... s, jittered).
    with _FlakyProxy(s3_server.port, [503, "reset"]) as proxy:
        storage = _through(proxy, s3_server, s3_location, max_attempts=4)
        storage.put_bytes("j/t/chk-1/_snapshot.json", b"{}")
        assert proxy.seen == ["PUT 503", "PUT reset", "PUT forward"]
    assert direct.get_bytes("j/t/chk-1/_snapshot.json") == b"{}"

    with _FlakyProxy(s3_server.port, [500]) as proxy:
        storage = _through(proxy, s3_server, s3_location, max_attempts=4)
        assert storage.get_bytes("j/t/chk-1/_snapshot.json") == b"{}"
        assert proxy.seen == ["GET 500", "GET forward"]


def test_retries_end_in_an_error(s3_server: S3Server, s3_location: S3Location) -> None:
    with _FlakyProxy(s3_server.port, [503] * 10) as proxy:
        storage = _through(proxy, s3_server, s3_location, max_attempts=2)
        with pytest.raises(S3StorageError, match="SlowDown"):
            storage.put_bytes("j/k", b"v")
        assert proxy.seen == ["PUT 503", "PUT 503"]
    assert not s3_storage_for(s3_server, s3_location).exists("j/k")
