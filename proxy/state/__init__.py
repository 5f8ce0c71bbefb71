"""What must survive a restart: API tokens (hashes only) and the purge audit log."""

from proxy.state.sqlite import AsyncState, AuditRecord, StateDB, TokenRecord

__all__ = ["AsyncState", "AuditRecord", "StateDB", "TokenRecord"]
