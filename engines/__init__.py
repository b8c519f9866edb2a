"""Conch's engines: asyncio + httpx + pydantic, never Qt (tests/engines/test_layering.py)."""
