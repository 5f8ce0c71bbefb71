"""Who may do what: API tokens, dashboard sessions, and throttles against guessing."""
