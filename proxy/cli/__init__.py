"""The command line: ``cdn-proxy`` (main) and its deploy-hook purge client (purge)."""
