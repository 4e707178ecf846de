from collections.abc import AsyncIterator

import pytest
from arq.connections import ArqRedis

from tests.unit.transport.arq_runs import empty_pool


@pytest.fixture
async def pool() -> AsyncIterator[ArqRedis]:
    async with empty_pool() as made:
        yield made
