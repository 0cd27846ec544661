"""Downloads of the preparation recipes: a URL (http(s):// or a file:// mirror) or a local copy,
checked against a sha256.

A file with a recorded sha256 (``scripts/recipes/SHA256SUMS``, or a recipe's ``--sha256 HASH``) is used
only when it matches.  A file without one is never reported as verified: its sha256 is printed in a
one-line warning saying how to pin it, and with ``--require-checksum`` (or ``REQUIRE_CHECKSUM=1`` in the
environment) the recipe stops there instead (a download is removed, nothing is left half-written).
"""
import hashlib
import os
import shutil
import urllib.request
from typing import Optional

from fairseq_local_repro.doors import Console, DoorError
from fairseq_local_repro.processes import REPO

SHA256SUMS = os.path.join(REPO, "scripts", "recipes", "SHA256SUMS")


def known_sha256(name: str) -> Optional[str]:
    """The recorded sha256 of the download ``name`` (None when none is recorded)."""
    with open(SHA256SUMS, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if not line.startswith("#") and len(fields) == 2 and fields[1] in (name, "*" + name):
                return fields[0]
    return None


def required() -> bool:
    return os.environ.get("REQUIRE_CHECKSUM", "0") == "1"


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_sha256(path: str, expected: Optional[str], what: str, console: Console, require: bool = False):
    """Verify ``path`` (``what`` names it in messages) against ``expected``; see the module's docstring."""
    got = sha256_of(path)
    if expected:
        if got != expected:
            raise DoorError(f"{what}: sha256 mismatch: expected {expected}, got {got}; a partial or different file "
                            "(pass --sha256 HASH for a repackaged mirror)")
        console.say(f"{what}: sha256 verified ({got})")
    elif require or required():
        raise DoorError(f"{what}: no sha256 recorded, refused under --require-checksum (REQUIRE_CHECKSUM=1); the file "
                        f"has sha256 {got}: check it, then pass --sha256 {got} or add '{got}  {what}' to "
                        "scripts/recipes/SHA256SUMS")
    else:
        console.warn(f"{what}: NOT verified, no sha256 recorded; the file has sha256 {got} (pin it: --sha256 {got}, "
                     f"or '{got}  {what}' in scripts/recipes/SHA256SUMS; REQUIRE_CHECKSUM=1 refuses unverified files)")


def download(url: str, dest: str, sha256: Optional[str], console: Console, require: bool = False):
    """``url`` into ``dest`` through a temporary name, verified (:func:`check_sha256`) before it is moved
    into place; nothing is left behind on an error."""
    tmp = f"{dest}.part.{os.getpid()}"
    try:
        try:
            with urllib.request.urlopen(url, timeout=120) as r, open(tmp, "wb") as f:
                shutil.copyfileobj(r, f)
        except Exception as e:  # one line: offline, 404, a bad file:// path...
            raise DoorError(f"cannot download {url}: {e or type(e).__name__} (offline? pass a local copy or a "
                            "file:// mirror)") from None
        check_sha256(tmp, sha256, url, console, require)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
