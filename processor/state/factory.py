"""The checkpoint storage a job's settings name: a directory, or s3://bucket/prefix."""

from __future__ import annotations

from processor.config import S3Location, Settings, SettingsError
from processor.state.dirs import private_dir
from processor.state.storage import CheckpointStorage, DirectoryStorage


def open_storage(settings: Settings) -> CheckpointStorage:
    location = settings.checkpoint_dir
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

        return S3Storage(
            location,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=settings.s3_secret_access_key,
        )
    return DirectoryStorage(private_dir(location, "PROCESSOR_CHECKPOINT_DIR"))
