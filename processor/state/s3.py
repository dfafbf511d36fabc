"""CheckpointStorage on S3, or on any server with the S3 API (MinIO, Ceph, SeaweedFS...).

Every request is retried by botocore ("standard" mode: exponential backoff with jitter on
throttling, 5xx and connection errors); reading a body that breaks off mid-way is retried
here. Files above `multipart_threshold` go up in parts of `part_size`, each part with its
Content-MD5 so the server rejects a corrupted one; a failed multipart upload is aborted.
An S3 PUT (or CompleteMultipartUpload) is atomic and durable once it returns, which is
what the protocol asks for.

Credentials are secrets: they live only in the boto3 client, never in a repr, a log line
or an error message (errors are re-raised as one-line S3StorageErrors with any credential
blanked out and without the botocore exception chained to them).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import SecretStr

from processor.config import S3Location
from processor.state.storage import SnapshotMissing, check_key

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

_MiB = 1 << 20
# S3's smallest part is 5 MiB; 16 MiB keeps a large file to few requests, and a put's
# memory to one part (RocksDB's table files are mostly smaller: they go up in one PUT).
MULTIPART_THRESHOLD = 16 * _MiB
PART_SIZE = 16 * _MiB
# botocore's attempts per request (the first included), each wait up to 20 s; a longer
# outage fails the put, and the checkpoint is declined rather than held up.
MAX_ATTEMPTS = 5
# A body that breaks off while it is being read: botocore has already returned the response.
_READ_ATTEMPTS = 4
_READ_BACKOFF_S = 0.5
_COPY_CHUNK = 1 << 20
_TMP_PREFIX = ".tmp-"
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_T = TypeVar("_T")

log = logging.getLogger(__name__)

# Their DEBUG lines carry the request headers, the access key id among them.
for _name in ("boto3", "botocore", "s3transfer", "urllib3"):
    logging.getLogger(_name).setLevel(logging.INFO)


class S3StorageError(OSError):
    """An S3 request failed (after its retries); the message is one line, credential-free."""


_clients: dict[tuple[object, ...], S3Client] = {}
_clients_lock = threading.Lock()


def _client(
    endpoint_url: str,
    region: str,
    access_key_id: SecretStr,
    secret_access_key: SecretStr,
    max_attempts: int,
    connect_timeout_s: float,
    read_timeout_s: float,
) -> S3Client:
    """One client per configuration and process: clients are thread-safe, and each new one
    loads botocore's service model again (a tenth of a second per task on restore)."""
    key = (
        endpoint_url,
        region,
        access_key_id.get_secret_value(),
        secret_access_key.get_secret_value(),
        max_attempts,
        connect_timeout_s,
        read_timeout_s,
    )
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            config = Config(
                retries={"mode": "standard", "total_max_attempts": max_attempts},
                connect_timeout=connect_timeout_s,
                read_timeout=read_timeout_s,
                # botocore's default CRC trailers (aws-chunked bodies) are AWS-only; other
                # servers refuse them. Content-MD5 is understood everywhere.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                # Other servers are usually reached by address, where virtual hosts fail.
                s3={"addressing_style": "path"} if endpoint_url else None,
                max_pool_connections=16,
            )
            session = boto3.session.Session(
                aws_access_key_id=access_key_id.get_secret_value() or None,
                aws_secret_access_key=secret_access_key.get_secret_value() or None,
                region_name=region or None,
            )
            client = session.client("s3", endpoint_url=endpoint_url or None, config=config)
            _clients[key] = client
        return client


class S3Storage:
    """CheckpointStorage in a bucket: key 'a/b' is the object <prefix>/a/b."""

    def __init__(
        self,
        location: S3Location,
        *,
        endpoint_url: str = "",
        region: str = "",
        access_key_id: SecretStr | None = None,
        secret_access_key: SecretStr | None = None,
        multipart_threshold: int = MULTIPART_THRESHOLD,
        part_size: int = PART_SIZE,
        list_page_size: int = 1000,
        max_attempts: int = MAX_ATTEMPTS,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
    ) -> None:
        self.location = location
        self.endpoint_url = endpoint_url
        self._multipart_threshold = multipart_threshold
        self._part_size = part_size
        self._list_page_size = list_page_size
        key_id = access_key_id or SecretStr("")
        secret = secret_access_key or SecretStr("")
        # Kept wrapped, for blanking them out of error messages.
        self._secrets = tuple(s for s in (key_id, secret) if s.get_secret_value())
        self._s3 = _client(
            endpoint_url,
            region,
            key_id,
            secret,
            max_attempts,
            connect_timeout_s,
            read_timeout_s,
        )

    def __repr__(self) -> str:
        endpoint = f", endpoint={self.endpoint_url!r}" if self.endpoint_url else ""
        return f"S3Storage({str(self.location)!r}{endpoint})"

    __str__ = __repr__

    # ----------------------------------------------------------------- writes

    def put_file(self, key: str, src: Path) -> None:
        name = self._name(key)
        size = src.stat().st_size
        if size <= self._multipart_threshold:
            self.put_bytes(key, src.read_bytes())
            return
        with src.open("rb") as source:
            self._multipart(key, name, source.read)

    def put_immutable_file(self, key: str, src: Path) -> None:
        # An object store has nothing to link to: an upload like any other.
        self.put_file(key, src)

    def put_bytes(self, key: str, data: bytes) -> None:
        name = self._name(key)
        self._call(
            "put",
            key,
            lambda: self._s3.put_object(
                Bucket=self.location.bucket, Key=name, Body=data, ContentMD5=_md5(data)
            ),
        )

    def _multipart(self, key: str, name: str, read: Callable[[int], bytes]) -> None:
        bucket = self.location.bucket
        upload = self._call(
            "put", key, lambda: self._s3.create_multipart_upload(Bucket=bucket, Key=name)
        )
        upload_id = upload["UploadId"]
        try:
            parts: list[CompletedPartTypeDef] = []
            number = 1
            while True:
                chunk = read(self._part_size)
                if not chunk and number > 1:
                    break
                etag = self._upload_part(key, name, upload_id, number, chunk)
                parts.append({"PartNumber": number, "ETag": etag})
                number += 1
            self._call(
                "put",
                key,
                lambda: self._s3.complete_multipart_upload(
                    Bucket=bucket,
                    Key=name,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                ),
            )
        except BaseException:
            # The parts would be billed (and kept) until a lifecycle rule removes them.
            try:
                self._s3.abort_multipart_upload(Bucket=bucket, Key=name, UploadId=upload_id)
            except (BotoCoreError, ClientError):
                log.warning("%s: could not abort the failed multipart upload of %r", self, key)
            raise

    def _upload_part(self, key: str, name: str, upload_id: str, number: int, chunk: bytes) -> str:
        response = self._call(
            "put",
            key,
            lambda: self._s3.upload_part(
                Bucket=self.location.bucket,
                Key=name,
                UploadId=upload_id,
                PartNumber=number,
                Body=chunk,
                ContentMD5=_md5(chunk),
            ),
        )
        return response["ETag"]

    def delete(self, key: str) -> None:
        name = self._name(key)
        # S3 answers 204 for a key that is not there: already idempotent.
        self._call(
            "delete", key, lambda: self._s3.delete_object(Bucket=self.location.bucket, Key=name)
        )

    # ----------------------------------------------------------------- reads

    def get_file(self, key: str, dest: Path) -> None:
        name = self._name(key)
        tmp = dest.with_name(f"{_TMP_PREFIX}{uuid.uuid4().hex}-{dest.name}")

        def fetch() -> None:
            body = self._call(
                "get",
                key,
                lambda: self._s3.get_object(Bucket=self.location.bucket, Key=name),
            )["Body"]
            with tmp.open("wb") as out:
                for chunk in body.iter_chunks(_COPY_CHUNK):
                    out.write(chunk)

        try:
            self._reading(key, fetch)
            # Rename so an interrupted download never leaves a plausible-looking file.
            tmp.replace(dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def get_bytes(self, key: str) -> bytes:
        name = self._name(key)

        def fetch() -> bytes:
            response = self._call(
                "get",
                key,
                lambda: self._s3.get_object(Bucket=self.location.bucket, Key=name),
            )
            return response["Body"].read()

        return self._reading(key, fetch)

    def exists(self, key: str) -> bool:
        name = self._name(key)
        try:
            self._call(
                "head", key, lambda: self._s3.head_object(Bucket=self.location.bucket, Key=name)
            )
        except SnapshotMissing:
            return False
        return True

    def list(self, prefix: str) -> list[str]:
        root = f"{self.location.prefix}/" if self.location.prefix else ""
        paginator = self._s3.get_paginator("list_objects_v2")

        def keys() -> list[str]:
            found = []
            pages = paginator.paginate(
                Bucket=self.location.bucket,
                Prefix=root + prefix,
                PaginationConfig={"PageSize": self._list_page_size},
            )
            for page in pages:
                for item in page.get("Contents", []):
                    name = item["Key"]
                    # Some servers list their directories ('a/b/'): not objects of ours.
                    if not name.endswith("/"):
                        found.append(name[len(root) :])
            return found

        return sorted(self._call("list", prefix, keys))

    # ----------------------------------------------------------------- internals

    def _name(self, key: str) -> str:
        check_key(key)
        return f"{self.location.prefix}/{key}" if self.location.prefix else key

    def _reading(self, key: str, fetch: Callable[[], _T]) -> _T:
        """``fetch`` again when the body broke off (botocore retried only the request)."""
        attempt = 1
        while True:
            try:
                return fetch()
            except S3StorageError:
                raise
            except (BotoCoreError, ConnectionError, TimeoutError) as exc:
                if attempt >= _READ_ATTEMPTS:
                    raise self._error("get", key, exc) from None
                time.sleep(random.uniform(0, _READ_BACKOFF_S * 2**attempt))
                attempt += 1

    def _call(self, op: str, key: str, request: Callable[[], _T]) -> _T:
        try:
            return request()
        except ClientError as exc:
            error = exc.response.get("Error", {})
            if op in ("get", "head") and error.get("Code") in _MISSING_CODES:
                raise SnapshotMissing(f"key {key!r} missing from {self.location}") from None
            raise self._error(op, key, exc) from None
        except BotoCoreError as exc:
            raise self._error(op, key, exc) from None

    def _error(self, op: str, key: str, exc: Exception) -> S3StorageError:
        detail = " ".join(str(exc).split())
        for secret in self._secrets:
            detail = detail.replace(secret.get_secret_value(), "**********")
        return S3StorageError(
            f"S3 {op} of {key!r} in {self.location} failed: {type(exc).__name__}: {detail}"
        )


def _md5(data: bytes) -> str:
    # Not for security: S3's integrity check of the bytes it received.
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
