"""What the running process reports: telemetry for /metrics and the dashboard."""
