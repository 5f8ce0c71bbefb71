"""The processes that run the planes: the one-process service, a node with its workers and
supervisor, and config reload."""
