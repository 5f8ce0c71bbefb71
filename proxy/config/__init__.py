"""Configuration: a TOML file turned into frozen dataclasses (model), each key's check (values),
the TLS files (tls), and what a reload changes (diff). The only code that reads files or the
environment."""
