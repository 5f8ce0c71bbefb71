"""The data plane: the aiohttp server and origin client around the sans-I/O core."""
