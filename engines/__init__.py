"""Conch's engines: asyncio + httpx + pydantic. Never imports Qt (tests/engines/test_layering.py)."""
