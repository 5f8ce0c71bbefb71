"""What is counted and logged: access-log lines, response figures, traffic by outcome."""
