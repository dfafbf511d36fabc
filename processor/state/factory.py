"""The checkpoint storage a job's settings name: a directory, or s3://bucket/prefix."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from processor.errors import SettingsError
from processor.state.dirs import private_dir
from processor.state.storage import CheckpointStorage, DirectoryStorage
from processor.storage_location import S3Location

if TYPE_CHECKING:
    from processor.config import Settings


@dataclass(frozen=True)
class StorageSpec:
    """What `open_storage` needs of the settings, in a form a process can be sent without
    importing the settings' pydantic models: a task's snapshot process starts in a tenth of
    a second less. ``s3``: the S3 settings (pydantic's SecretStr), only for an S3 location."""

    location: Path | S3Location
    s3: dict[str, Any] | None = None

    @classmethod
    def of(cls, settings: Settings) -> StorageSpec:
        location = settings.checkpoint_dir
        if not isinstance(location, S3Location):
            return cls(location)
        return cls(
            location,
            {
                "endpoint_url": settings.s3_endpoint_url,
                "region": settings.s3_region,
                "access_key_id": settings.s3_access_key_id,
                "secret_access_key": settings.s3_secret_access_key,
            },
        )


def open_storage(settings: Settings | StorageSpec) -> CheckpointStorage:
    spec = settings if isinstance(settings, StorageSpec) else StorageSpec.of(settings)
    location = spec.location
    if isinstance(location, S3Location):
        # Imported here: boto3 costs a noticeable start-up time nobody else should pay, and
        # it is an extra (processor[s3]).
        try:
            from processor.state.s3 import S3Storage
        except ImportError as exc:
            if exc.name not in ("boto3", "botocore"):
                raise
            raise SettingsError(
                f"invalid setting PROCESSOR_CHECKPOINT_DIR={location}: checkpoints in S3 need "
                "boto3, the extra processor[s3] (pip install 'processor[s3]')"
            ) from None

        return S3Storage(location, **(spec.s3 or {}))
    return DirectoryStorage(private_dir(location, "PROCESSOR_CHECKPOINT_DIR"))
