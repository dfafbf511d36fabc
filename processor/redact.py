"""Credentials out of what is logged or shown: a URL's or a DSN's password as ``***``.

A registry URL (``http://user:pass@host``), a PostgreSQL DSN, and error messages that quote
them go through `redacted` before they reach a ``repr``, a log line or a task's failure.
"""

from __future__ import annotations

import re

# A password in a DSN: a URL's in its user info or a parameter; a key=value string's pair.
_URL_PASSWORDS = (
    (re.compile(r"(://[^/@:?#]*:)[^/?#]*@"), r"\1***@"),
    (re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE), r"\1***"),
)
_PAIR_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")


def redacted(dsn: str) -> str:
    """``dsn`` (a URL, a key=value DSN, or a message quoting one) with its password, if
    any, shown as ``***``.

    >>> redacted("postgresql://app:s3cr@t@db:5432/app?password=x&sslmode=require")
    'postgresql://app:***@db:5432/app?password=***&sslmode=require'
    >>> redacted("host=db user=app password='a b' dbname=app")
    'host=db user=app password=*** dbname=app'
    """
    if "://" not in dsn:
        return _PAIR_PASSWORD.sub(r"\1***", dsn)
    for pattern, replacement in _URL_PASSWORDS:
        dsn = pattern.sub(replacement, dsn)
    return dsn
