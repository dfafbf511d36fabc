"""Where checkpoints go when not in a directory: `S3Location`, the settings' type for an
s3:// ``PROCESSOR_CHECKPOINT_DIR``. Standard library only, so a process that only stores
snapshots (processor.state.rocksdb.snapshot_process) reads one without importing the
settings' pydantic models."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema

# S3's rules for new bucket names (no dots-only or IP-like checks: the server has the last word).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class S3Location:
    """``s3://bucket/prefix``: where checkpoints go in an S3 (API) bucket."""

    __slots__ = ("bucket", "prefix")

    def __init__(self, bucket: str, prefix: str = "") -> None:
        self.bucket = bucket
        self.prefix = prefix  # without leading or trailing '/'; "" = the bucket's top

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        # Instances only: strings are parsed by Settings' validator. (Not a dataclass either:
        # pydantic-settings would JSON-decode the variable into a location nobody checked.)
        from pydantic_core import core_schema

        return core_schema.is_instance_schema(cls)

    @classmethod
    def parse(cls, text: str) -> S3Location:
        # The value is never echoed: a URL pasted with credentials in it must not be logged.
        rest = text.removeprefix("s3://")
        bucket, _, prefix = rest.partition("/")
        if not _BUCKET.match(bucket):
            raise ValueError(
                "the bucket of an s3:// location must be 3-63 lowercase letters, digits, '.' "
                "or '-' (s3://bucket/prefix)"
            )
        prefix = prefix.rstrip("/")
        if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
            raise ValueError(
                "the prefix of an s3:// location may not have empty, '.' or '..' parts"
            )
        return cls(bucket, prefix)

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def __repr__(self) -> str:
        return f"S3Location({self.bucket!r}, {self.prefix!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, S3Location):
            return NotImplemented
        return (self.bucket, self.prefix) == (other.bucket, other.prefix)

    def __hash__(self) -> int:
        return hash((self.bucket, self.prefix))
