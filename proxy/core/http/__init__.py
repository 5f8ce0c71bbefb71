"""HTTP messages (RFC 9110): dates, header fields, requests, ranges, codings, forwarding, upgrades
and TLS server names."""
