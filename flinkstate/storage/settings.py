"""Process-wide storage settings: what state handles may name, and how to reach S3. The CLI's global options
set them once (:func:`configure`); an explicit argument (``open_location(..., allow_external_handles=...)``,
``S3SavepointOutput(uri, options)``) overrides them for one call.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class HandlePolicy:
    """What state handles may name. ``allow_external_handles``: legacy savepoints whose absolute handles point
    outside the savepoint directory (off by default: such a ``_metadata`` could make flinkstate read and copy any
    file the user can read)."""

    allow_external_handles: bool = False


#: Process-wide default (the CLI's opt-in flag sets it); ``open_location(..., allow_external_handles=...)`` overrides.
handle_policy = HandlePolicy()


@dataclass
class S3Options:
    """How to reach S3. Unset fields fall back to boto3's usual sources: AWS_ENDPOINT_URL(_S3), AWS_REGION /
    AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/."""

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None


#: Process-wide S3 settings (the CLI's --s3-endpoint-url and --s3-region set them).
s3_options = S3Options()


__all__ = ["HandlePolicy", "S3Options", "handle_policy", "s3_options"]
