"""The sealed program format that ``ovl::program`` writes (a header, the SHA-256 digest of the
protobuf bytes, those bytes): checking it before anything decodes the program, and reading a
program's name without a protobuf library (for messages)."""

from __future__ import annotations

import hashlib
from typing import Optional

# A sealed program: this header, the SHA-256 digest of the protobuf bytes, those bytes. The header
# mirrors ovl::program::SEALED_PROGRAM_HEADER, the source of truth;
# ovl-tf-bridge/tests/python_constants.rs checks that they agree.
_SEALED_PROGRAM_HEADER = b"ovl.ir.Program sha256 v1\n"
_DIGEST_BYTES = 32


def _sealed_problem(sealed: bytes) -> Optional[str]:
    """Why sealed program bytes are not intact (header and SHA-256 digest, checked before
    anything decodes them), or None."""
    if not sealed.startswith(_SEALED_PROGRAM_HEADER):
        return (
            "it does not start with the header of a sealed ovl program (or an older ovl "
            "exported it)"
        )
    rest = sealed[len(_SEALED_PROGRAM_HEADER) :]
    if len(rest) < _DIGEST_BYTES:
        return f"it is truncated ({len(sealed)} bytes, shorter than its header and digest)"
    if hashlib.sha256(rest[_DIGEST_BYTES:]).digest() != rest[:_DIGEST_BYTES]:
        return "its SHA-256 digest does not match its contents"
    return None


def _digest(sealed: bytes) -> bytes:
    """The digest inside a sealed program (empty for bytes too short to hold one)."""
    return sealed[len(_SEALED_PROGRAM_HEADER) : len(_SEALED_PROGRAM_HEADER) + _DIGEST_BYTES]


def _program_name(sealed: bytes) -> Optional[str]:
    """The `name` field (2) of the ovl.ir.Program inside a sealed program, read without a
    protobuf library; None when it cannot be read."""
    data = sealed[len(_SEALED_PROGRAM_HEADER) + _DIGEST_BYTES :]
    pos = 0

    def varint():
        nonlocal pos
        value, shift = 0, 0
        while pos < len(data) and shift < 64:
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
        raise ValueError("truncated varint")

    try:
        while pos < len(data):
            tag = varint()
            field, wire = tag >> 3, tag & 7
            if wire == 0:
                varint()
            elif wire == 2:
                n = varint()
                if field == 2:
                    return data[pos : pos + n].decode("utf-8", "replace")
                pos += n
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                return None
    except ValueError:
        return None
    return None
