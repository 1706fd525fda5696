"""Whether a Redis server checks the password that the provider's config gives.

redis-py authenticates with ``HELLO 3 AUTH default <password>``, which a server
whose default user has no password (no ``requirepass``, the default) accepts
with any password at all. A config that gives a password then runs on a store
nobody protects (a password meant for the production server given to a local
one, a URL pointing at the wrong server) and nothing says so. So the first
client of each address in a process asks once: a connection without
credentials; if the server answers it, the log says the password is not
checked.

A named ACL user (``username`` other than ``default``) is left alone: the
default user being open says nothing about that user's password.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["warn_if_password_unchecked"]

log = logging.getLogger("statestream.redis")

# The addresses asked about in this process (a forked worker inherits them:
# the supervisor asked already).
_ASKED: set[str] = set()


def warn_if_password_unchecked(client: Any, address: str) -> bool:
    """Log a warning if ``client`` (a ``redis.Redis``) is configured with a password
    for the default user and the server at ``address`` answers without one.

    Returns whether it warned. Never raises: a server that cannot be reached
    is reported by the command the caller sends next.
    """
    pool = client.connection_pool
    kwargs = dict(pool.connection_kwargs)
    if not kwargs.get("password") or kwargs.get("username") not in (None, "default"):
        return False
    if address in _ASKED:
        return False
    _ASKED.add(address)
    from redis import ConnectionPool, Redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    for key in ("password", "username", "credential_provider"):
        kwargs.pop(key, None)
    kwargs["retry"] = Retry(NoBackoff(), 0)  # one look; the caller's command retries
    bare = ConnectionPool(connection_class=pool.connection_class, **kwargs)
    try:
        answered = bool(Redis(connection_pool=bare).ping())
    except Exception:  # NOAUTH: the server wants the password, as configured
        return False
    finally:
        bare.disconnect()
    if answered:
        log.warning(
            "redis at %s answers without a password, so the password in the redis state "
            "provider config is not checked: remove it from the config, or give the server "
            "one (requirepass, or ACL SETUSER default)",
            address,
        )
    return answered
