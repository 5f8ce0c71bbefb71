"""What must survive a restart: API tokens (hashes only) and the purge audit log."""

from proxy.state.async_state import AsyncState
from proxy.state.sqlite import AuditRecord, StateDB, TokenRecord

__all__ = ["AsyncState", "AuditRecord", "StateDB", "TokenRecord"]
