"""Where cached responses live, behind the small interface in ``base``."""
