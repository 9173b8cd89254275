"""Optional signed checkpoints: an HMAC over the manifest, so a changed checkpoint is refused.

The manifest's SHA-256s catch corruption, not malice: whoever can write the run
directory can change a file and its hash. With a key (``MNFRAME_CHECKPOINT_KEY`` or
``MNFRAME_CHECKPOINT_KEY_FILE``, never the config, which is recorded in the run
directory), rank 0 signs each manifest it writes: HMAC-SHA256 of the manifest's
canonical JSON (iteration, world size, configuration, every file's size and hash)
without the signature. Resume then verifies the chosen checkpoint's files (always,
whatever ``checkpoint.verify`` says) and its signature; a missing or wrong signature
is refused on every rank with status 2. Without a key nothing is signed or checked.
"""

import hashlib
import hmac
import json

from mnframe.runtime import settings

ALGORITHM = "hmac-sha256"


def key():
    """The signing key (bytes) from the environment, or None; ConfigError if both variables are set."""
    direct = settings.get("MNFRAME_CHECKPOINT_KEY")
    from_file = settings.get("MNFRAME_CHECKPOINT_KEY_FILE")
    if direct is not None and from_file is not None:
        from mnframe.runtime.errors import ConfigError

        raise ConfigError("MNFRAME_CHECKPOINT_KEY and MNFRAME_CHECKPOINT_KEY_FILE are both set: set one of them")
    return direct if direct is not None else from_file


def _body(manifest):
    raw = json.loads(manifest.to_json())
    raw.pop("signature", None)
    return json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str).encode("utf-8")


def sign(manifest, secret):
    """The signature of ``manifest`` under ``secret`` (``hmac-sha256:<hex>``)."""
    return f"{ALGORITHM}:{hmac.new(secret, _body(manifest), hashlib.sha256).hexdigest()}"


def problem(manifest, secret, where):
    """None if ``manifest`` (of checkpoint ``where``) carries a valid signature under ``secret``, else why not."""
    hint = "refusing to resume from it (its files or manifest may have been replaced)"
    if not manifest.signature:
        return (
            f"checkpoint {where} is not signed but MNFRAME_CHECKPOINT_KEY(_FILE) is set: {hint}; "
            f"unset the key to accept unsigned checkpoints"
        )
    if not hmac.compare_digest(str(manifest.signature), sign(manifest, secret)):
        return f"checkpoint {where} has a signature that does not verify with this key: {hint}"
    return None
