"""The sans-I/O core: pure rules with no event loop, network, clock or environment."""
