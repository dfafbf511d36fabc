"""Queryable state: which task owns a key (owners.py), the /state/ routes (routes.py), and the
coordinator's forwarding to the owning worker (forward.py)."""
