"""The shared-cache rules (RFC 9111): what is stored, under which key, and what may answer."""
